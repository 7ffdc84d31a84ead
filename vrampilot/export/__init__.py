"""llama-server command lines for a plan, quoted per shell; the engine uses the same builder."""

from vrampilot.export.args import llama_cpp_kwargs, llama_server_argv
from vrampilot.export.shell import SHELLS, quote

__all__ = ["SHELLS", "llama_cpp_kwargs", "llama_server_argv", "quote"]
