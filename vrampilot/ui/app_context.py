"""The composition root: everything the window and its controllers use, built once at launch.

The window builds none of its dependencies; `build_context` does, in the order that keeps two
starts on one data folder safe: the log, then every database (opened and migrated), and only then
the engine thread. Tests build one on a temporary folder and may pass a fixed machine, so that a
test does not depend on what this computer has.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from vrampilot.documents import DocumentStore, KvStateStore
from vrampilot.engine import Engine
from vrampilot.log import setup_logging
from vrampilot.speed import MeasuredMachine
from vrampilot.storage import ChatStore, ConversationService, Library, connect
from vrampilot.ui.prefs import Prefs
from vrampilot.ui.workers import EngineThread, Tasks


@dataclass
class AppContext:
    prefs: Prefs
    conn: sqlite3.Connection
    store: ChatStore
    conversations: ConversationService
    library: Library
    documents: DocumentStore
    kv_states: KvStateStore
    tasks: Tasks
    engine: EngineThread
    log_path: Path
    machine: MeasuredMachine | None = None  # a fixed machine (tests); None: detect this one at start
    closed: bool = field(default=False)

    def close(self) -> None:
        """Stop the threads, then close the databases (the reverse of building)."""
        if self.closed:
            return
        self.closed = True
        self.tasks.shutdown()
        self.engine.shutdown()
        self.documents.close()
        self.conn.close()
        self.prefs.sync()


def build_context(*, machine: MeasuredMachine | None = None, engine: Engine | None = None) -> AppContext:
    log_path = setup_logging()
    conn = connect()
    try:
        store = ChatStore(conn=conn)
        documents = DocumentStore()
    except BaseException:
        conn.close()
        raise
    context = AppContext(
        prefs=Prefs(),
        conn=conn,
        store=store,
        conversations=ConversationService(store),
        library=Library(conn=conn),
        documents=documents,
        kv_states=KvStateStore(),
        tasks=Tasks(),
        engine=EngineThread(engine),
        log_path=log_path,
        machine=machine,
    )
    context.engine.start()  # every database is open: threads may start now
    return context
