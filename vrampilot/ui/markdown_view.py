"""A read-only Markdown view that grows with its text (one per chat message).

Qt's own CommonMark reader (QTextDocument.setMarkdown, GitHub dialect) renders the text, so no
extra package is needed; fenced code blocks get a monospace font and a shaded background. The
user's own messages are shown as typed (`plain`): Markdown joins single line breaks, so a list, a
poem or code pasted without a fence ran together into one paragraph, as chat apps never show it.
"""

from __future__ import annotations

import re

from PySide6.QtCore import QEvent, QSize, Qt, QUrl
from PySide6.QtGui import (
    QColor,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QPalette,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget

COPY_SCHEME = "vrampilot-copy"
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def with_copy_links(markdown: str) -> tuple[str, list[str]]:
    """`markdown` with a "Copy code" link above each fenced code block, and each block's text (what
    its link copies: the code as written, without the fences). A block still streaming (no
    closing fence yet) runs to the end, as CommonMark reads it."""
    out: list[str] = []
    blocks: list[str] = []
    fence = ""
    code: list[str] = []
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if not fence and m:
            fence = m.group(1)
            out += [f"[Copy code]({COPY_SCHEME}:{len(blocks)})", ""]
            blocks.append("")
            code = []
        elif fence and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
            fence = ""
        elif fence:
            code.append(line)
            blocks[-1] = "\n".join(code)
        out.append(line)
    return "\n".join(out), blocks


_CODE_PROPS = (QTextFormat.Property.BlockCodeFence, QTextFormat.Property.BlockCodeLanguage)


def code_shade(palette: QPalette) -> QColor:
    """Base mixed with 8% of the text colour: darker in light themes, lighter in dark ones."""
    base = palette.color(QPalette.ColorRole.Base)
    text = palette.color(QPalette.ColorRole.Text)
    a = 0.08
    return QColor.fromRgbF(
        base.redF() * (1 - a) + text.redF() * a,
        base.greenF() * (1 - a) + text.greenF() * a,
        base.blueF() * (1 - a) + text.blueF() * a,
    )


class MarkdownView(QTextBrowser):
    def __init__(self, parent: QWidget | None = None, *, plain: bool = False) -> None:
        super().__init__(parent)
        self._markdown = ""
        self._plain = plain
        # Links are followed here: a web link opens in the browser, a code block's "Copy code"
        # copies that block (Qt would otherwise try to load any other link into this view).
        self.setOpenLinks(False)
        self.anchorClicked.connect(self._link)
        self._code: list[str] = []
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(lambda _s: self._fit())

    def markdown(self) -> str:
        return self._markdown

    def set_markdown(self, text: str) -> None:
        self._markdown = text
        if self._plain:
            self.setPlainText(text)
        else:
            shown, self._code = with_copy_links(text)
            self.setMarkdown(shown)
            self._style_code_blocks()
        self._fit()

    def code_blocks(self) -> list[str]:
        """The text of each fenced code block, in order: what its "Copy code" link copies."""
        return list(self._code)

    def copy_code(self, index: int) -> None:
        if 0 <= index < len(self._code):
            QGuiApplication.clipboard().setText(self._code[index])

    def _link(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            self.copy_code(int(url.path() or -1))
        elif url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    def _style_code_blocks(self) -> None:
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        # Say "fixed pitch, monospace" as well as the family: where the system's fixed font is
        # missing or misreported (Noto Sans Mono is not flagged fixed-pitch), Qt still picks one.
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setFixedPitch(True)
        shade = code_shade(self.palette())
        block = self.document().begin()
        cursor = QTextCursor(self.document())
        while block.isValid():
            fmt = block.blockFormat()
            if any(fmt.hasProperty(p) for p in _CODE_PROPS) or block.charFormat().fontFixedPitch():
                cursor.setPosition(block.position())
                bf = QTextBlockFormat()
                bf.setBackground(shade)
                cursor.mergeBlockFormat(bf)
                cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                cf = QTextCharFormat()
                cf.setFont(mono)
                cursor.mergeCharFormat(cf)
            block = block.next()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self._markdown:
            self.set_markdown(self._markdown)  # the code shade follows a light/dark switch

    def _fit(self) -> None:
        doc_h = self.document().size().height()
        margins = self.contentsMargins()
        self.setFixedHeight(int(doc_h + margins.top() + margins.bottom() + 2))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def sizeHint(self) -> QSize:
        return QSize(200, self.height())
