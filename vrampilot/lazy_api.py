"""A package's stated API, each name imported from its module on first use (PEP 562).

A package lists its modules and the names of its API each holds; `lazy_api` makes the package's
`__getattr__` and `__dir__` from that table. Importing the package then loads none of its modules,
and `from package import name` loads only the module that holds `name`, as importing that module
itself did. The type checker reads the same names from the package's `if TYPE_CHECKING:` imports
(tests/test_layers.py checks that both say the same), and never sees `__getattr__` (defined under
`if not TYPE_CHECKING:`), so a name outside the API stays an error there instead of an `object`.
Such a package sets `TYPE_CHECKING = False` itself, which the type checker takes for typing's:
importing typing would cost a child that loads one module a few milliseconds.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence

# module -> the API's names it holds, each "name" or "api_name=name" where the API renames it
Holders = Mapping[str, Sequence[str]]


def where(holders: Holders) -> dict[str, tuple[str, str]]:
    """API name -> (module, the name there)."""
    return {
        api: (module, name or api)
        for module, names in holders.items()
        for api, _, name in (n.partition("=") for n in names)
    }


def lazy_api(package: str, holders: Holders) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`: a name of the API is imported from its module on
    first use and kept in the package, so the next use is a plain attribute."""
    table = where(holders)

    def __getattr__(name: str) -> object:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = table[name]
        value = getattr(importlib.import_module(f"{package}.{module}"), attr)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
