"""Images kept with chats: copied into the data folder by content hash, refused in one line when the
engine could not take them, stored with their message, and a schema-3 database (before messages had
images) migrated with its chats intact."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.images import png_bytes
from tests.storage.old_db import old_database
from vrampilot.storage import ChatStore
from vrampilot.storage.conversation import ConversationService
from vrampilot.storage.db import _MIGRATIONS, DB_FILE
from vrampilot.storage.images import MAX_IMAGE_BYTES, ImageFileError, ImageStore


@pytest.fixture
def service(tmp_path: Path) -> ConversationService:
    return ConversationService(ChatStore(tmp_path / DB_FILE), ImageStore(tmp_path / "data" / "images"))


def test_an_image_is_copied_once_by_its_content(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    data = png_bytes(20, 10)
    (tmp_path / "a.png").write_bytes(data)
    (tmp_path / "same picture.PNG").write_bytes(data)
    a = store.add(tmp_path / "a.png")
    b = store.add(tmp_path / "same picture.PNG")
    assert a.sha256 == b.sha256 == hashlib.sha256(data).hexdigest()
    assert (a.name, b.name, a.suffix) == ("a.png", "same picture.PNG", ".png")
    assert [p.name for p in (tmp_path / "images").iterdir()] == [f"{a.sha256}.png"]
    assert store.path(a).read_bytes() == data
    # The copy outlives the original.
    (tmp_path / "a.png").unlink()
    assert store.path(a).is_file()


def test_what_the_engine_would_refuse_is_refused_in_one_line(tmp_path: Path) -> None:
    store = ImageStore(tmp_path / "images")
    (tmp_path / "notes.png").write_bytes(b"plain text, not an image")
    big = tmp_path / "big.png"
    with open(big, "wb") as fh:
        fh.write(png_bytes(4, 4))
        fh.truncate(MAX_IMAGE_BYTES + 1)
    cases = {
        "notes.png": "notes.png: not an image this engine reads (PNG, JPEG, GIF or BMP)",
        "big.png": "big.png: 32.0 MiB is too large (at most 32 MiB)",
        "gone.png": "gone.png: cannot read the image (No such file or directory)",
    }
    for name, message in cases.items():
        with pytest.raises(ImageFileError) as err:
            store.add(tmp_path / name)
        assert str(err.value) == message
    assert not (tmp_path / "images").exists() or not list((tmp_path / "images").iterdir())


def test_a_question_keeps_its_images_and_the_model_gets_the_copies(
    service: ConversationService, tmp_path: Path
) -> None:
    (tmp_path / "photo.png").write_bytes(png_bytes(8, 8))
    chat = service.create(model_path=None)
    images = service.keep_images([tmp_path / "photo.png"])
    service.ask(chat.id, "What is this?", images)
    stored = service.messages(chat.id)[0]
    assert stored.images == images and stored.images[0].name == "photo.png"
    (tmp_path / "photo.png").unlink()  # the chat does not need the original
    sent = service.for_model(chat.id)[-1]
    assert sent.content == "What is this?"
    assert [Path(p) for p in sent.images] == [service.images.path(images[0])]
    assert Path(sent.images[0]).read_bytes() == png_bytes(8, 8)
    # A question after an unanswered one joins it, images and all.
    (tmp_path / "b.png").write_bytes(png_bytes(9, 9))
    more = service.keep_images([tmp_path / "b.png"])
    q = service.ask(chat.id, "And this?", more)
    assert q.joined and q.message.images == (*images, *more)
    assert service.messages(chat.id)[0].images == (*images, *more)
    # Images alone (or with the same text) join it without repeating its text.
    (tmp_path / "c.png").write_bytes(png_bytes(7, 7))
    last = service.keep_images([tmp_path / "c.png"])
    q = service.ask(chat.id, "", last)
    assert q.message.content == "What is this?\n\nAnd this?" and q.message.images == (*images, *more, *last)
    service.store.update_message(q.message.id, q.message.content, images=(*images, *more))
    # Regenerate keeps the question's images; an edit without new images keeps them too.
    service.add_reply(chat.id, "Two gradients.")
    assert service.drop_last_reply(chat.id)
    assert service.for_model(chat.id)[-1].images == (*sent.images, str(service.images.path(more[0])))
    edited = service.replace_from(chat.id, 0, "Describe them.")
    assert edited.message.images == (*images, *more)
    exported = json.loads(service.export_text(chat.id, "json"))
    assert [i["name"] for i in exported["messages"][0]["images"]] == ["photo.png", "b.png"]
    assert "[image: photo.png]" in service.export_text(chat.id, "markdown")


def test_a_version_3_database_gains_message_images_and_keeps_its_chats(tmp_path: Path) -> None:
    """A database written before messages kept images (schema 3) opens, migrates, and its messages
    read as having none; new messages keep theirs."""
    path = tmp_path / DB_FILE
    raw = old_database(path, 3)
    raw.execute(
        "INSERT INTO chats (title, model_path, system_prompt, created_at, updated_at, backend) "
        "VALUES ('Old chat', '/m/a.gguf', '', 1.0, 2.0, 'llama.cpp')"
    )
    raw.execute("INSERT INTO messages (chat_id, position, role, content, created_at) VALUES (1, 0, 'user', 'hi', 1.0)")
    raw.execute(
        "INSERT INTO messages (chat_id, position, role, content, stats_json, created_at) "
        "VALUES (1, 1, 'assistant', 'hello', '{\"decode_tps\": 9.5}', 1.5)"
    )
    raw.commit()
    raw.close()

    service = ConversationService(ChatStore(path), ImageStore(tmp_path / "images"))
    try:
        version = service.store.connection.execute("PRAGMA user_version").fetchone()[0]
        assert version == len(_MIGRATIONS) >= 4
        old = service.chat(1)
        assert [(m.content, m.images, m.stats) for m in old.messages] == [
            ("hi", (), None),
            ("hello", (), {"decode_tps": 9.5}),
        ]
        (tmp_path / "p.png").write_bytes(png_bytes(5, 5))
        q = service.ask(1, "and this?", service.keep_images([tmp_path / "p.png"]))
        assert service.messages(1)[2].images == q.message.images != ()
    finally:
        service.store.close()
