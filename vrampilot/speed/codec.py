"""One codec between the speed record's frozen dataclasses and JSON: `encode` and `decode`.

Each field's type says how its value is read back: int, float, str and bool are converted as such,
`X | None` keeps None, `tuple[X, ...]` reads a list, and a dataclass field a nested record. A field's
metadata may give its key in the file (`key`), the digits a float keeps when written (`digits`),
or keep it out of the file (`stored=False`: set at run time, read back as its default); `meta`
builds that metadata.

Reading needs every stored field of the record's current schema: what an older file lacks, an
explicit migration step fills (speed/store.py, one step per schema number), so no reader guesses a
default for a key that is missing. Keys the record does not know are ignored. Bad data raises
KeyError, TypeError or ValueError, which the store turns into "ignoring the speed record".
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def meta(*, key: str | None = None, digits: int | None = None, stored: bool = True) -> dict[str, Any]:
    """A field's codec metadata: `field(metadata=meta(digits=4))`."""
    return {"key": key, "digits": digits, "stored": stored}


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    key: str
    kind: Any  # the field's resolved type
    digits: int | None


_FIELDS: dict[type, tuple[_Field, ...]] = {}  # each record class resolved once


def _fields(cls: type) -> tuple[_Field, ...]:
    known = _FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    _FIELDS[cls] = found = tuple(
        _Field(f.name, f.metadata.get("key") or f.name, hints[f.name], f.metadata.get("digits"))
        for f in dataclasses.fields(cls)
        if f.metadata.get("stored", True)
    )
    return found


def encode(record: object) -> dict[str, Any]:
    """The record as JSON-ready data (lists for tuples, nested records as dicts)."""
    return {f.key: _encode_value(getattr(record, f.name), f.digits) for f in _fields(type(record))}


def _encode_value(value: object, digits: int | None) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, tuple):
        return [_encode_value(v, digits) for v in value]
    if isinstance(value, float) and digits is not None:
        return round(value, digits)
    return value


def decode(cls: type[T], data: Mapping[str, Any]) -> T:
    """A `cls` from `encode`'s output of the current schema."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    return cls(**{f.name: _decode_value(f.kind, data[f.key]) for f in _fields(cls)})


def _decode_value(kind: Any, value: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin is types.UnionType or origin is typing.Union:
        if value is None:
            return None
        (inner,) = (a for a in typing.get_args(kind) if a is not type(None))
        return _decode_value(inner, value)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        if isinstance(value, str | bytes | Mapping):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return tuple(_decode_value(item, v) for v in value)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return decode(kind, value)
    if kind in (int, float, str, bool):
        return kind(value)
    raise TypeError(f"the speed record codec cannot read a {kind!r}")
