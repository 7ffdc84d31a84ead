"""How a chat search result reads: the title in bold, then where the text was found (the title, or
a message, with the chat's date), the match highlighted. As plain list text the title and the
matching message looked alike, and since a title is the first message's first line, results
looked duplicated (issue 58, low)."""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QAbstractTextDocumentLayout, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import QStyle, QStyledItemDelegate, QStyleOptionViewItem, QWidget

# The item's rich text (when it has one; plain rows paint as Qt paints them).
HTML_ROLE = Qt.ItemDataRole.UserRole + 1


def mark(text: str, query: str) -> str:
    """`text` as HTML with every case-insensitive occurrence of `query` highlighted."""
    if not query:
        return html.escape(text)
    parts = re.split(f"({re.escape(query)})", text, flags=re.IGNORECASE)
    return "".join(
        f"<b style='background-color:#fff3a0; color:black'>{html.escape(p)}</b>" if i % 2 else html.escape(p)
        for i, p in enumerate(parts)
    )


def result_html(title: str, snippet: str, when: str, query: str) -> str:
    where = f"in a message: {mark(snippet, query)}" if snippet else "in the title"
    return f"<b>{mark(title, query)}</b><br><small>{html.escape(when)} · {where}</small>"


class ResultDelegate(QStyledItemDelegate):
    """Paints rows that carry HTML_ROLE as rich text, wrapped to the list's width."""

    def _doc(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QTextDocument | None:
        text = index.data(HTML_ROLE)
        if not text:
            return None
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setHtml(str(text))
        doc.setTextWidth(max(40, option.rect.width() - 8))
        return doc

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        doc = self._doc(option, index)
        if doc is None:
            super().paint(painter, option, index)
            return
        self.initStyleOption(option, index)
        option.text = ""
        widget: QWidget | None = option.widget  # the list this delegate paints
        style = widget.style() if widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, widget)
        ctx = QAbstractTextDocumentLayout.PaintContext()
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        ctx.palette.setColor(QPalette.ColorRole.Text, option.palette.color(role))
        painter.save()
        painter.translate(option.rect.topLeft().x() + 4, option.rect.topLeft().y() + 2)
        doc.documentLayout().draw(painter, ctx)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        doc = self._doc(option, index)
        if doc is None:
            return super().sizeHint(option, index)
        return QSize(int(doc.idealWidth()), int(doc.size().height()) + 4)
