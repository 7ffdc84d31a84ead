"""The conversation: streamed Markdown replies, per-message actions, the input, the sampling panel.

Views only: the main window decides what happens on send, stop, edit and regenerate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QGuiApplication,
    QImage,
    QKeyEvent,
    QPalette,
    QPixmap,
    QResizeEvent,
    QStandardItemModel,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from vrampilot.engine import SamplingParams
from vrampilot.storage import IMAGE_FILE_SUFFIXES
from vrampilot.tool_turn import ToolRound, ToolStep
from vrampilot.ui.agents.transcript import ToolCallsView
from vrampilot.ui.chat import backend_choice
from vrampilot.ui.chat.backend_choice import BackendChoice
from vrampilot.ui.chat.markdown_view import MarkdownView
from vrampilot.ui.flow import flow_box

ROLE_NAMES = {"user": "You", "assistant": "Assistant", "system": "System"}
RENDER_INTERVAL_MS = 50  # streamed text is re-rendered at most this often
COPIED_MS = 1500  # how long a Copy button says "Copied"
THUMB_PX = 96  # an image's thumbnail in a message fits this square
ATTACHED_THUMB_PX = 64  # and one waiting under the input, this one
BANNER_TEXT_CHARS = 36  # the banner's text keeps this many average characters beside its choices


@dataclass(frozen=True)
class ToolSettings:
    """The chat's tools row: whether replies may call tools, llama-server's tool_choice for the first
    round ("auto" or "required"), and after how many rounds of calls the model must answer."""

    on: bool
    choice: str
    rounds: int


def thumbnail(image: QImage, size: int = THUMB_PX) -> QPixmap:
    return QPixmap.fromImage(
        image.scaled(QSize(size, size), Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
    )


def image_label(path: Path, name: str, size: int = THUMB_PX) -> QLabel:
    """An image's thumbnail (its name in the tooltip), or its name when the file cannot be shown."""
    label = QLabel()
    label.setObjectName("thumbnail")
    label.setToolTip(name)
    image = QImage(str(path))
    if image.isNull():
        label.setText(f"[image missing: {name}]")
        label.setEnabled(False)
    else:
        label.setPixmap(thumbnail(image, size))
        label.setFrameShape(QFrame.Shape.StyledPanel)
    label.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
    return label


class MessageWidget(QFrame):
    edit_requested = Signal(int)
    regenerate_requested = Signal()

    def __init__(
        self,
        position: int,
        role: str,
        content: str,
        stats_text: str = "",
        parent: QWidget | None = None,
        images: Sequence[tuple[Path, str]] = (),
    ):
        super().__init__(parent)
        self.position = position
        self.role = role
        self.setObjectName(f"message_{position}")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setProperty("role", role)
        if role == "user":
            # Theme-aware tint: the user's turns stand apart in light and dark alike.
            self.setAutoFillBackground(True)
            self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 6, 8, 6)
        head = QHBoxLayout()
        who = QLabel(f"<b>{ROLE_NAMES.get(role, role)}</b>")
        head.addWidget(who)
        head.addStretch(1)
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy this message")
        self.copy_button.setObjectName("copy")
        self.copy_button.clicked.connect(self._copy)
        head.addWidget(self.copy_button)
        self.edit_button = QToolButton()
        self.edit_button.setText("Edit")
        self.edit_button.setObjectName("edit")
        self.edit_button.setVisible(role == "user")
        self.edit_button.clicked.connect(lambda: self.edit_requested.emit(self.position))
        head.addWidget(self.edit_button)
        self.regenerate_button = QToolButton()
        self.regenerate_button.setText("Regenerate")
        self.regenerate_button.setObjectName("regenerate")
        self.regenerate_button.hide()
        self.regenerate_button.clicked.connect(self.regenerate_requested)
        head.addWidget(self.regenerate_button)
        for b in (self.copy_button, self.edit_button, self.regenerate_button):
            # Tool buttons take no keyboard focus by default: Tab and Shift+Tab would skip them.
            b.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        lay.addLayout(head)
        # The message's images (the copies kept in the data folder), above its text.
        self.thumbnails: list[QLabel] = []
        if images:
            row = QHBoxLayout()
            for path, name in images:
                label = image_label(path, name)
                self.thumbnails.append(label)
                row.addWidget(label)
            row.addStretch(1)
            lay.addLayout(row)
        self.body = MarkdownView(plain=role == "user")  # the user's words as typed, line breaks kept
        self.body.setObjectName("body")
        self.body.set_markdown(content)
        lay.addWidget(self.body)
        self.stats = QLabel(stats_text)
        self.stats.setObjectName("stats")
        self.stats.setWordWrap(True)
        self.stats.setEnabled(False)  # greyed: secondary information
        self.stats.setVisible(bool(stats_text))
        lay.addWidget(self.stats)
        # Set when the latest reply was made without this message ("Drop oldest turns").
        self.unseen = QLabel("<i>Not seen by the model: dropped so the latest reply fit the context</i>")
        self.unseen.setObjectName("unseen")
        self.unseen.setWordWrap(True)
        self.unseen.hide()
        lay.insertWidget(1, self.unseen)
        self._text = content
        self.tool_calls: ToolCallsView | None = None  # the calls this message made (a tool round)

    def add_tool_step(self, step: ToolStep) -> None:
        """A tool call of this reply, shown under its text."""
        if self.tool_calls is None:
            self.tool_calls = ToolCallsView()
            lay = self.layout()
            assert isinstance(lay, QVBoxLayout)
            lay.insertWidget(lay.indexOf(self.body) + 1, self.tool_calls)
        self.tool_calls.add_step(step)

    def text(self) -> str:
        return self._text

    def set_text(self, text: str) -> None:
        self._text = text
        self.body.set_markdown(text)

    def set_stats(self, text: str) -> None:
        self.stats.setText(text)
        self.stats.setVisible(bool(text))

    def set_unseen(self, unseen: bool) -> None:
        """Grey the message and say why: the model's latest reply was made without it."""
        self.unseen.setVisible(unseen)
        self.body.setEnabled(not unseen)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self._text)
        # Said where the user looks: on the button, for a moment.
        self.copy_button.setText("Copied")
        QTimer.singleShot(COPIED_MS, self.copy_button, lambda: self.copy_button.setText("Copy"))


class ElidedLabel(QLabel):
    """One line that is cut with "…" to the width it gets, never widening its column (a long chat
    title pushed the plan panel off the window); the whole text is in the tooltip."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(self.fontMetrics().averageCharWidth() * 8)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def _elide(self) -> None:
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width(), 1)))

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()


class InputEdit(QPlainTextEdit):
    """Ctrl+Enter sends; with "Enter sends" on, Enter sends and Shift+Enter breaks the line."""

    send = Signal()
    escape = Signal()
    files_dropped = Signal(list)  # list[Path]: files dropped onto the input (images to attach)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.enter_sends = False
        # Tab moves to the next control, as in every chat box; a tab character is rarely wanted.
        self.setTabChangesFocus(True)

    def keyPressEvent(self, e: QKeyEvent) -> None:
        if e.key() == Qt.Key.Key_Escape:
            # The window's Esc shortcut normally takes it first; this covers an inactive window.
            self.escape.emit()
            return
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = e.modifiers()
            if mods & Qt.KeyboardModifier.ControlModifier or (
                self.enter_sends and not mods & Qt.KeyboardModifier.ShiftModifier
            ):
                self.send.emit()
                return
        super().keyPressEvent(e)

    # Images dropped here are attached; other files go on to the window (documents, models); text
    # dropped is inserted, as usual.
    @staticmethod
    def _files(e: QDragEnterEvent | QDragMoveEvent | QDropEvent) -> list[Path] | None:
        """The local files dragged (None: not files); images among them, or [] when none is one."""
        mime = e.mimeData()
        if not mime.hasUrls() or not any(u.isLocalFile() for u in mime.urls()):
            return None
        files = [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()]
        return [f for f in files if f.suffix.lower() in IMAGE_FILE_SUFFIXES]

    def dragEnterEvent(self, e: QDragEnterEvent) -> None:
        self._drag(e, super().dragEnterEvent)

    def dragMoveEvent(self, e: QDragMoveEvent) -> None:
        self._drag(e, super().dragMoveEvent)

    def _drag(self, e: QDragEnterEvent | QDragMoveEvent, default: Callable[[Any], None]) -> None:
        files = self._files(e)
        if files is None:
            default(e)
        elif files:
            e.acceptProposedAction()
        else:
            e.ignore()  # the window takes them

    def dropEvent(self, e: QDropEvent) -> None:
        files = self._files(e)
        if files is None:
            super().dropEvent(e)
        elif files:
            e.acceptProposedAction()
            self.files_dropped.emit(files)
        else:
            e.ignore()


class AttachmentStrip(QWidget):
    """The images waiting to be sent with the next message: thumbnails, each with a remove button."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addStretch(1)
        self._items: list[tuple[Path, QWidget]] = []
        self.hide()

    def paths(self) -> list[Path]:
        return [p for p, _ in self._items]

    def add(self, path: Path, image: QImage) -> None:
        box = QFrame()
        box.setObjectName("attachment")
        box.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(box)
        lay.setContentsMargins(2, 2, 2, 2)
        pic = QLabel()
        pic.setObjectName("attachment_thumbnail")
        pic.setPixmap(thumbnail(image, ATTACHED_THUMB_PX))
        pic.setToolTip(path.name)
        lay.addWidget(pic, 0, Qt.AlignmentFlag.AlignHCenter)
        remove = QToolButton()
        remove.setObjectName("remove_attachment")
        remove.setText("Remove")
        remove.setToolTip(f"Do not send {path.name}")
        remove.clicked.connect(lambda: self.remove(path))
        lay.addWidget(remove, 0, Qt.AlignmentFlag.AlignHCenter)
        self._row.insertWidget(self._row.count() - 1, box)
        self._items.append((path, box))
        self.show()
        self.changed.emit()

    def remove(self, path: Path) -> None:
        for item in [i for i in self._items if i[0] == path]:
            self._items.remove(item)
            item[1].setParent(None)
            item[1].deleteLater()
        self.setVisible(bool(self._items))
        self.changed.emit()

    def clear(self) -> None:
        for path in self.paths():
            self.remove(path)


class SamplingPanel(QFrame):
    changed = Signal(object)  # SamplingParams

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        form = QFormLayout(self)
        self.temperature = self._double(0.0, 2.0, 0.05, "temperature")
        self.top_p = self._double(0.01, 1.0, 0.01, "top_p")
        self.top_k = self._int(0, 1000, "top_k")
        self.min_p = self._double(0.0, 1.0, 0.01, "min_p")
        self.repeat_penalty = self._double(0.5, 2.0, 0.01, "repeat_penalty")
        self.max_tokens = self._int(1, 131072, "max_tokens")
        self.seed = self._int(-1, 2**31 - 1, "seed")
        self.seed.setSpecialValueText("random")
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Min-p", self.min_p)
        form.addRow("Repeat penalty", self.repeat_penalty)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        self._loading = False

    def _double(self, lo: float, hi: float, step: float, name: str) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setObjectName(name)
        box.setRange(lo, hi)
        box.setSingleStep(step)
        box.setDecimals(2)
        box.valueChanged.connect(self._emit)
        return box

    def _int(self, lo: int, hi: int, name: str) -> QSpinBox:
        box = QSpinBox()
        box.setObjectName(name)
        box.setRange(lo, hi)
        box.valueChanged.connect(self._emit)
        return box

    def set_params(self, p: SamplingParams) -> None:
        self._loading = True
        try:
            self.temperature.setValue(p.temperature)
            self.top_p.setValue(p.top_p)
            self.top_k.setValue(p.top_k)
            self.min_p.setValue(p.min_p)
            self.repeat_penalty.setValue(p.repeat_penalty)
            self.max_tokens.setValue(p.max_tokens)
            self.seed.setValue(-1 if p.seed is None else p.seed)
        finally:
            self._loading = False

    def params(self) -> SamplingParams:
        seed = self.seed.value()
        return SamplingParams(
            temperature=self.temperature.value(),
            top_p=max(self.top_p.value(), 0.01),
            top_k=self.top_k.value(),
            min_p=self.min_p.value(),
            repeat_penalty=self.repeat_penalty.value(),
            max_tokens=self.max_tokens.value(),
            seed=None if seed < 0 else seed,
        )

    def _emit(self, *_a: object) -> None:
        if not self._loading:
            self.changed.emit(self.params())


class ChatView(QWidget):
    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()
    edit_requested = Signal(int)
    system_prompt_changed = Signal(str)
    sampling_changed = Signal(object)
    enter_sends_changed = Signal(bool)
    backend_changed = Signal(str)  # the user picked another backend for this chat
    attach_requested = Signal()  # the Attach button: the window asks for documents and images
    tools_toggled = Signal(bool)  # "Use tools" turned on or off
    files_attached = Signal(list)  # list[Path]: images dropped onto the input

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)

        top = QHBoxLayout()
        self.title = ElidedLabel()
        self.title.setObjectName("chat_title")
        f = self.title.font()
        f.setPointSizeF(f.pointSizeF() * 1.2)
        f.setBold(True)
        self.title.setFont(f)
        top.addWidget(self.title, 1)
        # Per chat, as LM Studio and Jan put the model choice: beside the chat's title.
        self.backend = QComboBox()
        self.backend.setObjectName("backend")
        self.set_backend_choices(backend_choice.choices(None, 0))
        self.backend.setToolTip("What replies in this chat")
        # Shrinks with a narrow window (the full label is in the list and the tooltip).
        self.backend.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.backend.setMinimumContentsLength(10)  # the window fits 640 px; the list shows labels whole
        self.backend.currentIndexChanged.connect(self._backend_picked)
        backend_label = QLabel("Backend")
        backend_label.setBuddy(self.backend)
        top.addWidget(backend_label)
        # It takes what the title leaves, up to its own label's width (set_backend_choices), so a
        # wide window shows the chosen config's bytes without opening the list.
        top.addWidget(self.backend, 1)
        self.system_toggle = QToolButton()
        self.system_toggle.setText("System prompt")
        self.system_toggle.setObjectName("system_toggle")
        self.system_toggle.setCheckable(True)
        top.addWidget(self.system_toggle)
        self.sampling_toggle = QToolButton()
        self.sampling_toggle.setText("Sampling")
        self.sampling_toggle.setObjectName("sampling_toggle")
        self.sampling_toggle.setCheckable(True)
        top.addWidget(self.sampling_toggle)
        lay.addLayout(top)

        # Tools (vrampilot.agents): off by default; on, the reply runs through the tool loop, every
        # call asked first. The cap ends a model that would call tools forever.
        tools_row = QHBoxLayout()
        self.use_tools = QCheckBox("Use tools")
        self.use_tools.setObjectName("use_tools")
        self.use_tools.setToolTip(
            "Let the model call the tools of your MCP servers (the MCP servers tab); you are asked before "
            "every call. Replies then run through llama-server (the Server tab)."
        )
        self.use_tools.toggled.connect(self.tools_toggled)
        tools_row.addWidget(self.use_tools)
        # llama-server's tool_choice for the first round: "required" with the reply started at the
        # template's call opener, so even a small model calls at once (docs/agents.md).
        self.tool_choice = QComboBox()
        self.tool_choice.setObjectName("tool_choice")
        self.tool_choice.addItem("model decides", "auto")
        self.tool_choice.addItem("call a tool first", "required")
        self.tool_choice.setToolTip(
            "Model decides: the model calls a tool when it judges one useful.\n"
            "Call a tool first: its first reply is one call of one of the allowed tools (it still chooses "
            "which, and the arguments); then it answers or calls again. For models too small to decide."
        )
        tools_row.addWidget(self.tool_choice)
        rounds_label = QLabel("at most")
        tools_row.addWidget(rounds_label)
        self.tool_rounds = QSpinBox()
        self.tool_rounds.setObjectName("tool_rounds")
        self.tool_rounds.setRange(1, 64)
        self.tool_rounds.setValue(8)
        self.tool_rounds.setSuffix(" rounds of calls")
        self.tool_rounds.valueChanged.connect(
            lambda n: self.tool_rounds.setSuffix(" round of calls" if n == 1 else " rounds of calls")
        )
        self.tool_rounds.setToolTip("After this many rounds of calls the model is asked to answer without tools")
        rounds_label.setBuddy(self.tool_rounds)
        tools_row.addWidget(self.tool_rounds)
        tools_row.addStretch(1)
        for w in (self.tool_choice, rounds_label, self.tool_rounds):
            w.setEnabled(False)
            self.use_tools.toggled.connect(w.setEnabled)
        lay.addLayout(tools_row)

        # What the chosen backend is, or why it cannot be used; hidden for plain llama.cpp chats.
        self.backend_note = QLabel()
        self.backend_note.setObjectName("backend_note")
        self.backend_note.setWordWrap(True)
        self.backend_note.setFrameShape(QFrame.Shape.StyledPanel)
        self.backend_note.setMargin(4)
        self.backend_note.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.backend_note.hide()
        lay.addWidget(self.backend_note)

        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("system_prompt")
        self.system_prompt.setPlaceholderText("System prompt (empty: the model's default)")
        self.system_prompt.setMaximumHeight(self.fontMetrics().height() * 5)
        self.system_prompt.hide()
        self.system_toggle.toggled.connect(self.system_prompt.setVisible)
        self._system_timer = QTimer(self)
        self._system_timer.setSingleShot(True)
        self._system_timer.setInterval(400)
        self._system_timer.timeout.connect(lambda: self.system_prompt_changed.emit(self.system_prompt.toPlainText()))
        self.system_prompt.textChanged.connect(self._system_timer.start)
        lay.addWidget(self.system_prompt)

        self.sampling = SamplingPanel()
        self.sampling.setObjectName("sampling")
        self.sampling.hide()
        self.sampling_toggle.toggled.connect(self.sampling.setVisible)
        self.sampling.changed.connect(self.sampling_changed)
        lay.addWidget(self.sampling)

        self.messages_area = QScrollArea()
        self.messages_area.setObjectName("messages")
        self.messages_area.setWidgetResizable(True)
        self.messages_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._container = QWidget()
        self._list = QVBoxLayout(self._container)
        self._list.setContentsMargins(4, 4, 4, 4)
        self._list.addStretch(1)
        self.messages_area.setWidget(self._container)
        lay.addWidget(self.messages_area, 1)
        self.empty_hint = QLabel()
        self.empty_hint.setObjectName("empty_hint")
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._list.insertWidget(0, self.empty_hint)

        # Banner: overflow choices, edit mode, errors
        self.banner = QFrame()
        self.banner.setObjectName("banner")
        self.banner.setFrameShape(QFrame.Shape.StyledPanel)
        bl = QGridLayout(self.banner)
        bl.setContentsMargins(6, 4, 6, 4)
        bl.setColumnStretch(0, 1)
        self._model_failure = ""  # the banner's text while it says a model could not be read
        self.banner_text = QLabel()
        self.banner_text.setObjectName("banner_text")
        self.banner_text.setWordWrap(True)
        bl.addWidget(self.banner_text, 0, 0)
        # The choices sit beside the text where the text keeps a readable width, else under it,
        # wrapping: in one row they set the chat column's minimum width (_place_banner_buttons).
        self._banner_box, self._banner_flow = flow_box(self.banner)
        self._banner_box.setObjectName("banner_buttons")
        bl.addWidget(self._banner_box, 0, 1)
        self._banner_buttons: list[QPushButton] = []
        self._banner_grid = bl
        self.banner.installEventFilter(self)
        self.banner.hide()
        lay.addWidget(self.banner)

        self.attachments = AttachmentStrip()
        self.attachments.setObjectName("attachments")
        lay.addWidget(self.attachments)
        bottom = QHBoxLayout()
        self.input = InputEdit()
        self.input.setObjectName("input")
        self.input.setMaximumHeight(self.fontMetrics().height() * 6)
        self.input.send.connect(self._send)
        self.input.escape.connect(self.stop_requested)
        self.input.files_dropped.connect(self.files_attached)
        bottom.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setObjectName("attach")
        self.attach_button.setToolTip(
            "Attach documents (PDF, Word, HTML, Markdown, text, source code) to this chat, or images (PNG, JPEG, "
            "GIF, BMP) to show the model with your message; you can also drop them on the window. Images need "
            "the vision projector on in the Plan panel."
        )
        self.attach_button.clicked.connect(self.attach_requested)
        buttons.addWidget(self.attach_button)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("send")
        self.send_button.clicked.connect(self._send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stop")
        self.stop_button.setToolTip("Esc")
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.setEnabled(False)
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        self.enter_sends = QCheckBox("Enter sends")
        self.enter_sends.setObjectName("enter_sends")
        self.enter_sends.toggled.connect(self._enter_sends_toggled)
        buttons.addWidget(self.enter_sends)
        bottom.addLayout(buttons)
        lay.addLayout(bottom)
        self._update_send_hint()

        self._messages: list[MessageWidget] = []
        self._streaming: MessageWidget | None = None
        self._stream_text = ""
        self._render_timer = QTimer(self)
        self._render_timer.setSingleShot(True)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._render_timer.timeout.connect(self._render_stream)
        self._follow = True
        self.messages_area.verticalScrollBar().rangeChanged.connect(self._range_changed)
        self.messages_area.verticalScrollBar().valueChanged.connect(self._scrolled)
        self.busy = False

    # -- input ---------------------------------------------------------------------------------
    def _enter_sends_toggled(self, on: bool) -> None:
        self.input.enter_sends = on
        self._update_send_hint()
        self.enter_sends_changed.emit(on)

    def set_enter_sends(self, on: bool) -> None:
        self.enter_sends.setChecked(on)
        self.input.enter_sends = on
        self._update_send_hint()

    def _update_send_hint(self) -> None:
        hint = "Enter sends, Shift+Enter new line" if self.input.enter_sends else "Ctrl+Enter sends"
        self.input.setPlaceholderText(f"Message the model ({hint}; Esc stops)")
        self.send_button.setToolTip(hint)

    def _send(self) -> None:
        text = self.input.toPlainText().strip()
        if (text or self.attachments.paths()) and not self.busy:
            self.send_requested.emit(text)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.banner and event.type() == QEvent.Type.Resize:
            self._place_banner_buttons()
        return super().eventFilter(watched, event)

    def clear_input(self) -> None:
        self.input.clear()
        self.attachments.clear()

    def focus_input(self) -> None:
        self.input.setFocus(Qt.FocusReason.ShortcutFocusReason)

    def show_documents(self, panel: QWidget) -> None:
        """The attached documents' panel, just above the banner."""
        lay = self.layout()
        assert isinstance(lay, QVBoxLayout)
        lay.insertWidget(lay.indexOf(self.banner), panel)

    def set_input(self, text: str) -> None:
        self.input.setPlainText(text)

    def pending_images(self) -> list[Path]:
        """The images attached to the next message."""
        return self.attachments.paths()

    def add_pending_image(self, path: Path, image: QImage) -> None:
        if path not in self.attachments.paths():
            self.attachments.add(path, image)

    def sampling_params(self) -> SamplingParams:
        return self.sampling.params()

    def set_sampling_params(self, params: SamplingParams) -> None:
        self.sampling.set_params(params)

    def system_prompt_text(self) -> str:
        return self.system_prompt.toPlainText()

    def tool_settings(self) -> ToolSettings:
        return ToolSettings(
            self.use_tools.isChecked(), str(self.tool_choice.currentData() or "auto"), self.tool_rounds.value()
        )

    # -- backend -------------------------------------------------------------------------------
    def _backend_picked(self, index: int) -> None:
        self._fit_backend_width()
        if index >= 0 and not self.backend.signalsBlocked():
            self.backend_changed.emit(self.backend.itemData(index))

    def set_backend_choices(self, items: Sequence[BackendChoice]) -> None:
        """List these backends (their labels carry the bytes each would hold), keeping the choice shown;
        one that cannot be used is listed greyed with why in its tooltip."""
        current = self.backend.currentData()
        self.backend.blockSignals(True)
        self.backend.clear()
        for item in items:
            self.backend.addItem(item.label, item.key)
            self.backend.setItemData(
                self.backend.count() - 1, item.unavailable or item.tooltip, Qt.ItemDataRole.ToolTipRole
            )
        for item in items:
            if item.unavailable:
                self.set_backend_available(item.key, False, item.unavailable)
        self.backend.setCurrentIndex(max(0, self.backend.findData(current)))
        self.backend.blockSignals(False)
        # The closed selector shrinks with the window; its list shows every label whole.
        self.backend.view().setMinimumWidth(self.backend.view().sizeHintForColumn(0) + 24)
        self._fit_backend_width()

    def _fit_backend_width(self) -> None:
        """The closed selector grows no wider than the chosen label needs (arrow and frame included)."""
        text = self.backend.currentText()
        self.backend.setMaximumWidth(self.backend.fontMetrics().horizontalAdvance(text) + 48)

    def set_backend(self, key: str) -> None:
        """Show `key` as this chat's backend without reporting it as the user's choice."""
        self.backend.blockSignals(True)
        self.backend.setCurrentIndex(max(0, self.backend.findData(key)))
        self.backend.blockSignals(False)
        self._fit_backend_width()

    def current_backend(self) -> str:
        return str(self.backend.currentData())

    def set_backend_available(self, key: str, available: bool, why: str = "") -> None:
        """Grey out a backend (kept in the list, so the user learns it exists) and say why in its tooltip."""
        index = self.backend.findData(key)
        model = self.backend.model()
        if index < 0 or not isinstance(model, QStandardItemModel):
            return
        item = model.item(index)
        item.setEnabled(available)
        item.setToolTip(why)
        self.backend.setToolTip("What replies in this chat" + (f"\n{why}" if why else ""))

    def backend_available(self, key: str) -> bool:
        model = self.backend.model()
        index = self.backend.findData(key)
        return isinstance(model, QStandardItemModel) and index >= 0 and model.item(index).isEnabled()

    def set_backend_note(self, text: str) -> None:
        self.backend_note.setText(text)
        self.backend_note.setVisible(bool(text))

    # -- messages ------------------------------------------------------------------------------
    def set_title(self, title: str) -> None:
        self.title.set_full_text(title)

    def title_text(self) -> str:
        return self.title.full_text()

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt.blockSignals(True)
        self.system_prompt.setPlainText(text)
        self.system_prompt.blockSignals(False)
        self.system_toggle.setText("System prompt •" if text else "System prompt")

    def set_empty_hint(self, text: str) -> None:
        self.empty_hint.setText(text)
        self.empty_hint.setVisible(not self._messages and bool(text))

    def clear_messages(self) -> None:
        for w in self._messages:
            w.setParent(None)
            w.deleteLater()
        self._messages.clear()
        self._streaming = None
        self.empty_hint.setVisible(bool(self.empty_hint.text()))

    def messages(self) -> list[MessageWidget]:
        return list(self._messages)

    def add_message(
        self, position: int, role: str, content: str, stats_text: str = "", images: Sequence[tuple[Path, str]] = ()
    ) -> MessageWidget:
        """`images`: (file, name) of each image the message shows the model, as thumbnails."""
        w = MessageWidget(position, role, content, stats_text, images=images)
        w.edit_requested.connect(self.edit_requested)
        w.regenerate_requested.connect(self.regenerate_requested)
        self._list.insertWidget(self._list.count() - 1, w)
        self._messages.append(w)
        self.empty_hint.hide()
        self._update_actions()
        self._follow = True
        return w

    def add_tool_round(self, position: int, rnd: ToolRound) -> MessageWidget:
        """A stored round of tool calls: the model's text, then each call with its result."""
        w = self.add_message(position, "assistant", rnd.text)
        for step in rnd.steps:
            w.add_tool_step(step)
        return w

    def add_tool_step(self, step: ToolStep) -> None:
        """A call the streaming reply made, shown as soon as it ended."""
        if self._streaming is not None:
            self._streaming.add_tool_step(step)

    def end_tool_round(self, text: str, next_position: int) -> None:
        """The round's calls are done: its message keeps its own text, and the model's next words
        stream into a new message below it."""
        self._render_timer.stop()
        if self._streaming is not None:
            self._streaming.set_text(text)
            self._streaming.set_stats("")
        self.begin_reply(next_position)

    def mark_unseen(self, n_messages: int) -> None:
        """Mark the first `n_messages` messages as not seen by the model's latest reply."""
        for i, w in enumerate(self._messages):
            w.set_unseen(i < n_messages)

    def begin_reply(self, position: int) -> MessageWidget:
        w = self.add_message(position, "assistant", "")
        w.set_stats("…")
        self._streaming = w
        self._stream_text = ""
        return w

    def resume_reply(self, text: str) -> MessageWidget | None:
        """Stream into the last message, after its `text` (Continue)."""
        w = self._messages[-1] if self._messages else None
        if w is not None:
            w.set_stats("…")
            self._streaming = w
            self._stream_text = text
            self._update_actions()
        return w

    def append_reply_text(self, text: str) -> None:
        self._stream_text += text
        if not self._render_timer.isActive():
            self._render_timer.start()

    def _render_stream(self) -> None:
        if self._streaming is not None:
            self._streaming.set_text(self._stream_text)

    def finish_reply(self, text: str, stats_text: str) -> None:
        self._render_timer.stop()
        if self._streaming is not None:
            self._streaming.set_text(text)
            self._streaming.set_stats(stats_text)
        self._streaming = None
        self._update_actions()

    def drop_reply(self) -> None:
        """Remove the reply being streamed (it failed before producing anything)."""
        self._render_timer.stop()
        if self._streaming is not None:
            self._messages.remove(self._streaming)
            self._streaming.setParent(None)
            self._streaming.deleteLater()
        self._streaming = None
        self._update_actions()

    def streamed_text(self) -> str:
        return self._stream_text

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.backend.setEnabled(not busy)
        self.use_tools.setEnabled(not busy)
        self.send_button.setEnabled(not busy)
        self.attach_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy)
        self._update_actions()

    def _update_actions(self) -> None:
        last_assistant = next((w for w in reversed(self._messages) if w.role == "assistant"), None)
        for w in self._messages:
            w.regenerate_button.setVisible(w is last_assistant and w is self._messages[-1] and not self.busy)
            w.edit_button.setEnabled(not self.busy)

    # -- scrolling: follow the stream unless the user scrolled up ------------------------------
    def _scrolled(self, value: int) -> None:
        bar = self.messages_area.verticalScrollBar()
        self._follow = value >= bar.maximum() - 4

    def _range_changed(self, _lo: int, hi: int) -> None:
        if self._follow:
            self.messages_area.verticalScrollBar().setValue(hi)

    # -- banner --------------------------------------------------------------------------------
    def show_banner(self, text: str, actions: list[tuple[str, str, object]] | None = None) -> None:
        """`actions`: (object name, label, callback)."""
        for b in self._banner_buttons:
            b.setParent(None)
            b.deleteLater()
        self._banner_buttons = []
        self.banner_text.setText(text)
        for name, label, callback in actions or []:
            b = QPushButton(label)
            b.setObjectName(name)
            b.clicked.connect(callback)
            self._banner_flow.addWidget(b)
            self._banner_buttons.append(b)
        self.banner.show()
        self._place_banner_buttons()

    def _place_banner_buttons(self) -> None:
        """Beside the text while it keeps BANNER_TEXT_CHARS of width, else on rows under it."""
        grid, box = self._banner_grid, self._banner_box
        margins = grid.contentsMargins()
        room = self.banner.width() - margins.left() - margins.right() - grid.horizontalSpacing()
        beside = room - box.sizeHint().width() >= BANNER_TEXT_CHARS * self.fontMetrics().averageCharWidth()
        at = (0, 1) if beside else (1, 0)
        row, column, _rows, _columns = cast(tuple[int, int, int, int], grid.getItemPosition(grid.indexOf(box)))
        if (row, column) != at:
            grid.removeWidget(box)
            grid.addWidget(box, *at)

    def hide_banner(self) -> None:
        self.banner.hide()

    def show_model_failure(self, why: str) -> None:
        self._model_failure = why
        self.show_banner(why, [("banner_ok", "OK", self.hide_banner)])

    def model_read(self) -> None:
        """A model the user chose reads: the banner about an earlier unreadable one is over (a
        banner about something else stays)."""
        if self._model_failure and self.banner_text.text() == self._model_failure:
            self.hide_banner()
        self._model_failure = ""

    def banner_visible(self) -> bool:
        # Not isVisible(): on a hidden tab every child reports invisible.
        return not self.banner.isHidden()


__all__ = ["AttachmentStrip", "ChatView", "MessageWidget", "SamplingPanel"]
