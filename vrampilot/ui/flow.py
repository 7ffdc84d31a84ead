"""A row of buttons that wraps onto more rows when its column is narrow.

Qt has no flow layout of its own. The chat's banner needs one: its choices ("Drop the 2 oldest
messages", "Re-plan with 1K context", "Cancel") in one row were wider than the chat column of an
800x600 window, so the row set the column's minimum width, which took the Plan panel's room, and
the banner's text was squeezed into a tall strip cut at the bottom (issue 58).
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QSizePolicy, QWidget


class FlowLayout(QLayout):
    """Items left to right, right-aligned in each row, a new row when the next would not fit."""

    def __init__(self, parent: QWidget | None = None, spacing: int = 6) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._gap = spacing
        self.setContentsMargins(QMargins(0, 0, 0, 0))

    def addItem(self, item: QLayoutItem) -> None:
        self._items.append(item)

    def count(self) -> int:
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self) -> Qt.Orientation:
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:
        """All in one row."""
        shown = self._shown()
        width = sum(i.sizeHint().width() for i in shown) + self._gap * max(len(shown) - 1, 0)
        height = max((i.sizeHint().height() for i in shown), default=0)
        return QSize(width, height)

    def minimumSize(self) -> QSize:
        """The widest item alone: narrower than the row, the items go one under another."""
        shown = self._shown()
        return QSize(max((i.minimumSize().width() for i in shown), default=0), self.heightForWidth(0))

    def _shown(self) -> list[QLayoutItem]:
        return [i for i in self._items if not i.isEmpty()]

    def _place(self, rect: QRect, move: bool) -> int:
        """Lay the items out in `rect` (or only measure); returns the height they take."""
        rows: list[list[QLayoutItem]] = [[]]
        used = 0
        for item in self._shown():
            w = item.sizeHint().width()
            if rows[-1] and used + self._gap + w > rect.width():
                rows.append([])
                used = 0
            used += (self._gap if rows[-1] else 0) + w
            rows[-1].append(item)
        y = rect.y()
        for row in rows:
            if not row:
                continue
            height = max(i.sizeHint().height() for i in row)
            if move:
                width = sum(i.sizeHint().width() for i in row) + self._gap * (len(row) - 1)
                x = rect.x() + max(rect.width() - width, 0)
                for item in row:
                    item.setGeometry(QRect(QPoint(x, y), QSize(min(item.sizeHint().width(), rect.width()), height)))
                    x += item.sizeHint().width() + self._gap
            y += height + self._gap
        return max(y - rect.y() - self._gap, 0)


def flow_box(parent: QWidget | None = None) -> tuple[QWidget, FlowLayout]:
    """A widget holding a FlowLayout, its height following its width."""
    box = QWidget(parent)
    policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
    policy.setHeightForWidth(True)
    box.setSizePolicy(policy)
    return box, FlowLayout(box)
