"""A read-only Markdown view that grows with its text (one per chat message).

Qt's own CommonMark reader (QTextDocument.setMarkdown, GitHub dialect) renders the text, so no
extra package is needed; HTML in the text is shown as the text it is, never rendered (a model's
reply could otherwise colour, hide or link anything), and an image it links is named, not shown
(Qt would read any local file the reply names). Fenced
code blocks get a monospace font, a shaded background and syntax colours: the scanner in
code_tokens.py finds keywords, strings, comments and numbers, and their ranges of the document's
text are coloured (no HTML is built, so nothing needs escaping). The
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
    QResizeEvent,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget

from vrampilot.ui.chat.code_tokens import tokens
from vrampilot.ui.theme import code_colors, code_shade

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
# GitHub's dialect with every kind of HTML shown as text.
MARKDOWN_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)


def _is_code(block: QTextBlock) -> bool:
    fmt = block.blockFormat()
    return any(fmt.hasProperty(p) for p in _CODE_PROPS) or block.charFormat().fontFixedPitch()


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
            self.document().setMarkdown(shown, MARKDOWN_FEATURES)
            self._no_images()
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

    def _no_images(self) -> None:
        """An image a reply links (`![x](file:///...)`) is named, not shown: Qt would read any local
        file the model names and show it (a message's own images are thumbnails above its text)."""
        doc = self.document()
        found: list[tuple[int, int, str]] = []
        block = doc.begin()
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                if frag.charFormat().isImageFormat():
                    found.append((frag.position(), frag.length(), frag.charFormat().toImageFormat().name()))
                it += 1
            block = block.next()
        cursor = QTextCursor(doc)
        for pos, length, name in reversed(found):
            cursor.setPosition(pos)
            cursor.setPosition(pos + length, QTextCursor.MoveMode.KeepAnchor)
            cursor.insertText(f"[image not shown: {name}]", QTextCharFormat())

    def _style_code_blocks(self) -> None:
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        # Say "fixed pitch, monospace" as well as the family: where the system's fixed font is
        # missing or misreported (Noto Sans Mono is not flagged fixed-pitch), Qt still picks one.
        mono.setStyleHint(QFont.StyleHint.Monospace)
        mono.setFixedPitch(True)
        shade = code_shade(self.palette())
        colors = code_colors(self.palette())
        block = self.document().begin()
        cursor = QTextCursor(self.document())
        run: list[QTextBlock] = []  # the lines of one code block, highlighted together
        while block.isValid():
            if _is_code(block):
                cursor.setPosition(block.position())
                bf = QTextBlockFormat()
                bf.setBackground(shade)
                cursor.mergeBlockFormat(bf)
                cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
                cf = QTextCharFormat()
                cf.setFont(mono)
                cursor.mergeCharFormat(cf)
                if run and run[-1].blockFormat().stringProperty(QTextFormat.Property.BlockCodeLanguage) != (
                    block.blockFormat().stringProperty(QTextFormat.Property.BlockCodeLanguage)
                ):
                    self._highlight(run, colors)
                    run = []
                run.append(block)
            elif run:
                self._highlight(run, colors)
                run = []
            block = block.next()
        if run:
            self._highlight(run, colors)

    def _highlight(self, lines: list[QTextBlock], colors: dict[str, QColor]) -> None:
        """Colour one code block's keywords, strings, comments and numbers. Its lines are
        consecutive blocks, so an offset into their text joined by newlines is a document position
        from the first line's (a block's separator counts one position, as the newline does)."""
        info = lines[0].blockFormat().stringProperty(QTextFormat.Property.BlockCodeLanguage)
        start = lines[0].position()
        cursor = QTextCursor(self.document())
        for t in tokens("\n".join(b.text() for b in lines), info):
            cursor.setPosition(start + t.start)
            cursor.setPosition(start + t.end, QTextCursor.MoveMode.KeepAnchor)
            cf = QTextCharFormat()
            cf.setForeground(colors[t.kind])
            if t.kind == "comment":
                cf.setFontItalic(True)
            cursor.mergeCharFormat(cf)

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
