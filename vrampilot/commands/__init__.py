"""CLI subcommands of the Qt-free core."""
