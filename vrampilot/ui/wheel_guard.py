"""Scrolling a panel must not change the settings under the pointer.

Qt gives the mouse wheel to a combo box or spin box that the pointer passes over, so scrolling the
Plan panel turned K/V cache types and pinned them. Guarded widgets take the wheel only once the
user has clicked or tabbed into them; otherwise the panel scrolls, as in every settings page.
"""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractScrollArea, QAbstractSpinBox, QComboBox, QWidget


class _WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Wheel or not isinstance(watched, QWidget) or watched.hasFocus():
            return False
        # The widget never sees it; the panel around it scrolls instead.
        area = watched.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if isinstance(area, QAbstractScrollArea):
            QCoreApplication.sendEvent(area.viewport(), event)
        return True


_guard = _WheelGuard()


def guard_wheel(root: QWidget) -> None:
    """Guard every combo box and spin box inside `root`."""
    for w in [*root.findChildren(QComboBox), *root.findChildren(QAbstractSpinBox)]:
        w.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        w.installEventFilter(_guard)
