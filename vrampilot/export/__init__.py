"""llama-server command lines for a plan, quoted per shell; the engine uses the same builder.

The package's API is what this file imports; its modules are private to it (make lint)."""

from vrampilot.export.args import NGRAM_SIZE, llama_cpp_kwargs, llama_server_argv
from vrampilot.export.shell import SHELLS, quote

__all__ = ["NGRAM_SIZE", "SHELLS", "llama_cpp_kwargs", "llama_server_argv", "quote"]
