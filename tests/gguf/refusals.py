"""A header the spec refuses: refused with GGUFError, in one line that names the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from vrampilot.gguf.reader import GGUFError
from vrampilot.gguf.spec import load_model_spec


def one_line_refusal(path: Path) -> str:
    """The spec's refusal of `path`, checked to be one line that starts with the file's path."""
    with pytest.raises(GGUFError) as err:
        load_model_spec(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path))
    return message
