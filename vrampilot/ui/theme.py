"""Light and dark follow the system.

Qt 6.5+ reports the system's colour scheme; where the platform style does not switch its palette
itself (Fusion on Linux, offscreen), a dark palette is applied. Custom painting reads the palette,
so it follows too. Fonts are never set in pixels: text scales with the system font size.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

COMPONENT_COLORS = {
    "weights": "#4e79a7",
    "kv": "#f28e2b",
    "compute": "#b07aa1",
    "output": "#59a14f",
    "margin": "#9c9c9c",
    "projector": "#edc948",
}
OVER_BUDGET = "#e15759"
OK_GREEN = "#2e9d57"
WARN_AMBER = "#c98a00"


def is_dark(palette: QPalette | None = None) -> bool:
    pal = palette or QGuiApplication.palette()
    return pal.color(QPalette.ColorRole.Window).lightness() < 128


def _dark_palette() -> QPalette:
    p = QPalette()
    base = QColor(32, 33, 36)
    window = QColor(41, 42, 45)
    text = QColor(232, 234, 237)
    p.setColor(QPalette.ColorRole.Window, window)
    p.setColor(QPalette.ColorRole.WindowText, text)
    p.setColor(QPalette.ColorRole.Base, base)
    p.setColor(QPalette.ColorRole.AlternateBase, window)
    p.setColor(QPalette.ColorRole.ToolTipBase, window)
    p.setColor(QPalette.ColorRole.ToolTipText, text)
    p.setColor(QPalette.ColorRole.Text, text)
    p.setColor(QPalette.ColorRole.Button, window)
    p.setColor(QPalette.ColorRole.ButtonText, text)
    p.setColor(QPalette.ColorRole.Highlight, QColor(66, 133, 244))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor(255, 255, 255))
    p.setColor(QPalette.ColorRole.Link, QColor(138, 180, 248))
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor(154, 160, 166))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.WindowText, QPalette.ColorRole.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(128, 128, 128))
    return p


def apply_theme(app: QApplication) -> None:
    """Match the system scheme now and whenever it changes."""
    app.setStyle("Fusion")
    apply_scheme(app, app.styleHints().colorScheme())
    app.styleHints().colorSchemeChanged.connect(lambda scheme: apply_scheme(app, scheme))


def apply_scheme(app: QApplication, scheme: Qt.ColorScheme) -> None:
    standard = app.style().standardPalette()
    if scheme == Qt.ColorScheme.Dark and not is_dark(standard):
        app.setPalette(_dark_palette())
    else:
        app.setPalette(standard)
