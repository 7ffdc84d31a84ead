"""Experimental backend: a Llama-family model in torch with a DeepSeek-V4-style hybrid KV cache.

Importing this package must not import torch (an optional extra): the CLI registers `hybrid-eval`
from vrampilot.commands.hybrid_eval either way and only needs torch when the command runs.
"""
