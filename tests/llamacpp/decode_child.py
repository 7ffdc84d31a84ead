"""Run by the dispatch tests, natively or under qemu-user: load the engine, decode a few tokens.

Prints one JSON line: the CPU variant loaded (and how), the backends, and the greedy tokens.
`LLAMA_CPP_LIB_PATH` points llama-cpp-python (and so the dispatch) at another library folder,
which is how the installer's own libraries are tested.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vrampilot import llamacpp  # noqa: E402
from vrampilot.llamacpp.backends import loaded_backends  # noqa: E402


def main() -> None:
    model, n_tokens = sys.argv[1], int(sys.argv[2])
    # The sentence said this many times: more than one token per row makes every weight a
    # matrix-matrix product (on a CPU with AMX, the sapphirerapids variant's tile kernels).
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    llama_cpp = llamacpp.load()
    loaded = loaded_backends()
    assert loaded is not None
    llm = llama_cpp.Llama(model, n_ctx=128, n_batch=32, n_ubatch=32, n_threads=1, n_threads_batch=1, verbose=False)
    prompt = llm.tokenize(b" ".join([b"The capital of France is"] * repeats), add_bos=True)
    out: list[int] = []
    for tok in llm.generate(prompt, temp=0.0, top_k=1):
        out.append(int(tok))
        if len(out) == n_tokens:
            break
    print(
        json.dumps(
            {
                "mode": loaded.mode,
                "variant": loaded.cpu_variant,
                "dispatch": loaded.describe_cpu(),
                "registered": list(loaded.registered),
                "lib_dir": loaded.lib_dir,
                "features": list(loaded.cpu_features),
                # llama.cpp's own view of its registry, through libllama: what it really runs with.
                "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
                "prompt_tokens": len(prompt),
                "tokens": out,
                "text": llm.detokenize(out).decode("utf-8", "replace"),
            }
        )
    )


if __name__ == "__main__":
    main()
