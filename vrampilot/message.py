"""One chat message as every layer passes it: the storage's conversation service builds them, the
documents compose them, the engine renders them with the model's template. It lives below all of
them so none has to import another for a two-field type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}
