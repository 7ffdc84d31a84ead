"""Light and dark: following the system, or the one the user chose (View > Theme).

Qt 6.5+ reports the system's colour scheme and announces each change (QStyleHints.colorScheme,
colorSchemeChanged); where the platform style does not switch its palette itself (Fusion on Linux,
offscreen), a dark palette is applied. With "Light" or "Dark" chosen the system's changes are
ignored and the palette is set outright (Fusion's own follows the system on Windows and macOS).
Custom painting reads the palette, so it follows too, and so do code blocks' colours
(`code_colors`). Fonts are never set in pixels: text scales with the system font size.
"""

from __future__ import annotations

from typing import Literal

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

ThemeChoice = Literal["system", "light", "dark"]
THEME_CHOICES: dict[ThemeChoice, str] = {"system": "System", "light": "Light", "dark": "Dark"}

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


def _light_palette() -> QPalette:
    """Fusion's light colours, for "Light" chosen while the system (and so Fusion) is dark."""
    p = QPalette(QColor(239, 239, 239))  # Qt derives every role from the button colour, as Fusion's
    p.setColor(QPalette.ColorRole.Base, QColor(255, 255, 255))
    p.setColor(QPalette.ColorRole.AlternateBase, QColor(247, 247, 247))
    p.setColor(QPalette.ColorRole.Text, QColor(0, 0, 0))
    p.setColor(QPalette.ColorRole.WindowText, QColor(0, 0, 0))
    p.setColor(QPalette.ColorRole.ButtonText, QColor(0, 0, 0))
    p.setColor(QPalette.ColorRole.Highlight, QColor(48, 140, 198))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor(255, 255, 255))
    p.setColor(QPalette.ColorRole.Link, QColor(0, 0, 255))
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor(255, 255, 220))
    p.setColor(QPalette.ColorRole.ToolTipText, QColor(0, 0, 0))
    return p


class _Theme:
    """The user's choice and the one connection to the system's announcements (apply_theme runs
    once per window in tests, and a connection per call would pile up)."""

    choice: ThemeChoice = "system"
    app: QApplication | None = None


_theme = _Theme()


def apply_theme(app: QApplication, choice: ThemeChoice | None = None) -> None:
    """Fusion with the palette of `choice` (None: the one applied last, "system" at first), now and,
    while it is "system", whenever the system's scheme changes."""
    # Only when another style is on: setStyle deletes the style in use, and a widget still drawing
    # with it (one waiting for deleteLater, a delegate) then reads freed memory: a choice made from
    # the View menu, with windows open, crashed the app's event loop.
    if app.style().name().lower() != "fusion":
        app.setStyle("Fusion")
    if _theme.app is not app:
        _theme.app = app
        app.styleHints().colorSchemeChanged.connect(lambda scheme: _system_changed(app, scheme))
    if choice is not None:
        _theme.choice = choice
    hints = app.styleHints()
    if hasattr(hints, "unsetColorScheme"):  # Qt 6.8+ asks the platform too (Windows' title bars)
        if _theme.choice == "system":
            hints.unsetColorScheme()
        else:
            hints.setColorScheme(Qt.ColorScheme.Dark if _theme.choice == "dark" else Qt.ColorScheme.Light)
    _apply(app, hints.colorScheme())


def theme_choice() -> ThemeChoice:
    return _theme.choice


def _system_changed(app: QApplication, scheme: Qt.ColorScheme) -> None:
    if _theme.choice == "system":
        _apply(app, scheme)


def _apply(app: QApplication, system: Qt.ColorScheme) -> None:
    standard = app.style().standardPalette()
    dark = _theme.choice == "dark" or (_theme.choice == "system" and system == Qt.ColorScheme.Dark)
    if dark:
        app.setPalette(standard if is_dark(standard) else _dark_palette())
    elif _theme.choice == "light" and is_dark(standard):
        app.setPalette(_light_palette())
    else:
        app.setPalette(standard)


def code_shade(palette: QPalette) -> QColor:
    """A code block's background: Base mixed with 8% of the text colour, darker in light themes,
    lighter in dark ones."""
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    a = 0.08
    return QColor.fromRgbF(
        base.redF() * (1 - a) + text.redF() * a,
        base.greenF() * (1 - a) + text.greenF() * a,
        base.blueF() * (1 - a) + text.blueF() * a,
    )


# Syntax colours of code blocks (GitHub's light and dark themes), each readable on `code_shade`
# at WCAG's 4.5:1 for body text (tests/ui/test_window_colours_and_numbers.py checks it).
_CODE_LIGHT = {
    "keyword": "#b31d28",
    "constant": "#0550ae",
    "number": "#0550ae",
    "string": "#0a3069",
    "comment": "#57606a",
}
_CODE_DARK = {
    "keyword": "#ff7b72",
    "constant": "#79c0ff",
    "number": "#79c0ff",
    "string": "#a5d6ff",
    "comment": "#9ea7b3",
}


def code_colors(palette: QPalette) -> dict[str, QColor]:
    """A code token kind's colour (vrampilot/ui/chat/code_tokens.py) for this palette's darkness."""
    return {k: QColor(v) for k, v in (_CODE_DARK if is_dark(palette) else _CODE_LIGHT).items()}
