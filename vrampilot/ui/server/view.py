"""The Server tab: serve the planned model to other programs (editors, agents, Open WebUI) over an
OpenAI-compatible API, and see what it does. The state lives in ServerController."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from vrampilot.ui.theme import OK_GREEN, OVER_BUDGET, WARN_AMBER

LOG_BLOCKS = 2000
STATE_COLORS = {
    "ready": OK_GREEN,
    "hung": WARN_AMBER,  # ready, and not answering
    "starting": WARN_AMBER,
    "stopping": WARN_AMBER,
    "crashed": OVER_BUDGET,
}


@dataclass(frozen=True)
class ServerSettings:
    """What the tab is set to: whether other devices may connect, the port, and the API key (None:
    no key; blanks at a key's ends never reach llama-server in a header, so a blank key is no key
    and one typed with a blank works as clients send it)."""

    lan: bool
    port: int
    api_key: str | None


class ServerPanel(QWidget):
    start_requested = Signal()
    stop_requested = Signal()
    lan_toggled = Signal(bool)
    port_changed = Signal(int)
    new_key_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        intro = QLabel(
            "Serve the planned model to other programs on an OpenAI-compatible API (llama-server, the "
            "same build and settings as the chat). While it runs the chat uses it too: the model is in "
            "memory once."
        )
        intro.setWordWrap(True)
        lay.addWidget(intro)
        form = QFormLayout()
        self.port = QSpinBox()
        self.port.setObjectName("server_port")
        self.port.setRange(1024, 65535)
        self.port.setValue(8080)
        self.port.valueChanged.connect(self.port_changed)
        form.addRow("Port", self.port)
        self.lan = QCheckBox("Allow other devices on my network")
        self.lan.setObjectName("server_lan")
        self.lan.setToolTip("Listens on every network interface; an API key is then required")
        self.lan.toggled.connect(self.lan_toggled)
        form.addRow("", self.lan)
        key_row = QHBoxLayout()
        self.key = QLineEdit()
        self.key.setObjectName("server_key")
        self.key.setReadOnly(True)
        self.key.setPlaceholderText("no key: this machine only")
        self.copy_key = QPushButton("Copy")
        self.copy_key.setObjectName("server_copy_key")
        self.copy_key.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.key.text()))
        self.new_key = QPushButton("New key")
        self.new_key.setObjectName("server_new_key")
        self.new_key.clicked.connect(self.new_key_requested)
        for w in (self.key, self.copy_key, self.new_key):
            key_row.addWidget(w)
        form.addRow("API key", key_row)
        url_row = QHBoxLayout()
        self.url = QLineEdit()
        self.url.setObjectName("server_url")
        self.url.setReadOnly(True)
        self.copy_url = QPushButton("Copy")
        self.copy_url.setObjectName("server_copy_url")
        self.copy_url.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.url.text()))
        url_row.addWidget(self.url)
        url_row.addWidget(self.copy_url)
        form.addRow("Base URL", url_row)
        lay.addLayout(form)
        buttons = QHBoxLayout()
        self.start = QPushButton("Start server")
        self.start.setObjectName("server_start")
        self.start.clicked.connect(self.start_requested)
        self.stop = QPushButton("Stop")
        self.stop.setObjectName("server_stop")
        self.stop.clicked.connect(self.stop_requested)
        buttons.addWidget(self.start)
        buttons.addWidget(self.stop)
        buttons.addStretch(1)
        lay.addLayout(buttons)
        self.status = QLabel("Stopped")
        self.status.setObjectName("server_status")
        self.status.setWordWrap(True)
        self.status.setTextFormat(self.status.textFormat())
        lay.addWidget(self.status)
        self.stats = QLabel("")
        self.stats.setObjectName("server_stats")
        self.stats.setWordWrap(True)
        lay.addWidget(self.stats)
        self.log = QPlainTextEdit()
        self.log.setObjectName("server_log")
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_BLOCKS)
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log.setPlaceholderText("llama-server's log appears here")
        lay.addWidget(self.log, 1)
        self.show_state("stopped", "Stopped")

    def show_state(self, state: str, text: str) -> None:
        """`state`: stopped, starting, ready, hung (ready and not answering), stopping or crashed."""
        color = STATE_COLORS.get(state)
        self.status.setText(f"<b style='color:{color}'>{text}</b>" if color else text)
        running = state in ("starting", "ready", "hung", "stopping")
        self.start.setEnabled(not running)
        self.stop.setEnabled(state in ("starting", "ready", "hung"))
        self.port.setEnabled(not running)
        self.lan.setEnabled(not running)
        self.new_key.setEnabled(not running)

    def settings(self) -> ServerSettings:
        return ServerSettings(self.lan.isChecked(), self.port.value(), self.key.text().strip() or None)

    def set_key(self, key: str | None) -> None:
        self.key.setText(key or "")

    def set_port(self, port: int) -> None:
        self.port.setValue(port)

    def show_url(self, url: str) -> None:
        self.url.setText(url)

    def show_stats(self, text: str) -> None:
        self.stats.setText(text)

    def clear_log(self) -> None:
        self.log.clear()

    def append_log(self, line: str) -> None:
        self.log.appendPlainText(line)
