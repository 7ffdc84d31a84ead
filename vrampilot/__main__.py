"""`vrampilot` / `python -m vrampilot`: the GUI with no arguments, CLI subcommands otherwise."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from vrampilot.cli import main as cli_main

    return cli_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
