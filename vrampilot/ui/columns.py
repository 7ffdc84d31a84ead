"""The window's three columns: a chat list that steps aside in a narrow window and comes back when
asked, and a side panel whose column is as wide as its content needs, within what the window has.

Kept out of the window (which only builds and wires) because the rules interlock: the panel's
minimum depends on whether the chat list is shown, and showing the list takes room from the chat
first, then from the panel.
"""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow, QScrollArea, QSplitter, QStackedWidget, QTabWidget

from vrampilot.ui.chat.chat_list import ChatList

# The narrowest window the layout is made for (docs/user-guide.md): the chat list steps aside, and
# only below about 800 pixels does the Plan panel's column get narrower than its content.
MIN_WINDOW_WIDTH = 640
# Widths in average characters of the window's font.
NARROW_WINDOW_CHARS = 150  # below it the chat list steps aside, as chat apps do with their sidebar
CHAT_LIST_MIN_CHARS = 22  # a shown chat list is never squeezed to a sliver
PANEL_MIN_CHARS = 30  # narrower is unreadable: the panel scrolls sideways instead


class Columns:
    def __init__(
        self,
        window: QMainWindow,
        splitter: QSplitter,
        chat_list: ChatList,
        center_tabs: QTabWidget,
        right_tabs: QTabWidget,
        right_scroll: QScrollArea,
    ) -> None:
        self._window, self._splitter, self._chat_list = window, splitter, chat_list
        self._center_tabs, self._right_tabs, self._right_scroll = center_tabs, right_tabs, right_scroll
        self._narrow: bool | None = None  # the window is too narrow for the chat list (window_resized)
        self.action: QAction | None = None  # View > Chat list, checked while the list shows

    def _em(self) -> int:
        return self._window.fontMetrics().averageCharWidth()

    def fit_panel_width(self) -> None:
        """The side panel's column at least as wide as its content's minimum, plus the scroll bar,
        but never so wide that the window could not be MIN_WINDOW_WIDTH wide. With the chat
        column's own minimum that cap is what binds at common font sizes: from about 800 pixels
        the splitter gives the panel its whole width (the chat stretches, the panel keeps its
        share), and below it, or when the user drags the splitter or shows the chat list in a
        window too narrow for all three, the panel scrolls sideways. Called when the content asks
        for a new layout, from the window's own event filter (a filter object apart from the window
        was called while the window's children were destroyed, and crashed)."""
        scroll, tabs_widget = self._right_scroll, self._right_tabs
        content = scroll.widget()
        if content is None:
            return
        need = (
            content.minimumSizeHint().width() + scroll.verticalScrollBar().sizeHint().width() + 2 * scroll.frameWidth()
        )
        # Said on the tabs (the splitter reads its child's explicit minimum; without one, the
        # widest tab's, the Server tab's, counted) with their frame.
        stack = tabs_widget.findChild(QStackedWidget)
        frame = max(tabs_widget.minimumSizeHint().width() - stack.minimumSizeHint().width(), 0) if stack else 0
        # What the rest of the window needs, read from the window itself (chat, handles, margins),
        # with the chat list's handle counted even while a narrow window hides the list.
        panel_now = tabs_widget.minimumWidth() or tabs_widget.minimumSizeHint().width()
        others = self._window.minimumSizeHint().width() - panel_now
        if self._chat_list.isHidden():
            others += self._splitter.handleWidth()
        tabs = min(need + frame, max(MIN_WINDOW_WIDTH - others, PANEL_MIN_CHARS * self._em()))
        if tabs_widget.minimumWidth() != tabs:
            scroll.setMinimumWidth(tabs - frame)
            tabs_widget.setMinimumWidth(tabs)

    def set_chat_list_shown(self, shown: bool) -> None:
        """Show or hide the chat list (View > Chat list, Ctrl+F, a window that narrows or widens)."""
        was_hidden = self._chat_list.isHidden()
        self._chat_list.setHidden(not shown)
        if self.action is not None:
            self.action.setChecked(shown)
        if shown and was_hidden:
            self._widen_chat_list(collapsed_too=True)

    def set_action(self, action: QAction) -> None:
        """View > Chat list: checkable, checked while the list shows."""
        self.action = action
        action.setCheckable(True)
        action.setChecked(not self._chat_list.isHidden())

    def toggle_chat_list(self) -> None:
        self.set_chat_list_shown(self._chat_list.isHidden())

    def search_chats(self) -> None:
        """Ctrl+F: the search field, with the chat list shown first if a narrow window hid it (else
        the keys went into a field nobody could see)."""
        self.set_chat_list_shown(True)
        self._chat_list.focus_search()

    def _widen_chat_list(self, collapsed_too: bool = False) -> None:
        """A shown chat list is never squeezed to a sliver; one the user collapsed by dragging the
        splitter stays so, unless it is being shown (`collapsed_too`)."""
        least = CHAT_LIST_MIN_CHARS * self._em()
        sizes = self._splitter.sizes()
        if not self._chat_list.isHidden() and (collapsed_too or sizes[0] > 0) and sizes[0] < least:
            # The room comes from the chat down to its minimum, then from the side panel.
            short = least - sizes[0]
            from_chat = min(short, max(sizes[1] - self._center_tabs.minimumSizeHint().width(), 0))
            from_panel = min(short - from_chat, max(sizes[2] - self._right_tabs.minimumWidth(), 0))
            self._splitter.setSizes([sizes[0] + from_chat + from_panel, sizes[1] - from_chat, sizes[2] - from_panel])

    def window_resized(self) -> None:
        """Below NARROW_WINDOW_CHARS the chat list gives its room to the chat and the plan (Ctrl+Tab
        still goes through the chats); it returns when there is room. Only crossing the width
        decides: in between, View > Chat list (and Ctrl+F) shows it."""
        narrow = self._window.width() < NARROW_WINDOW_CHARS * self._em()
        if narrow != self._narrow:
            self._narrow = narrow
            self.set_chat_list_shown(not narrow)
        else:
            self._widen_chat_list()
