"""Which architectures the cache formula (planner/memory/kv.py) is verified on, and which llama.cpp counts.

The formula is exact against llama.cpp for the architectures in VERIFIED, each held against real
allocations by the test named beside it. Every other architecture the vendored llama.cpp loads is
routed: the plan takes its KV cache, compute and output buffers from llama.cpp's own dry run (no
allocation, as its `--fit` does) at the candidate settings, and says "counted by llama.cpp".
"""

from __future__ import annotations

# general.architecture values whose cache planner/memory/kv.py computes exactly (docs/exactness.md).
VERIFIED = frozenset(
    {
        # tests/planner/test_kv.py::test_fixture_kv_matches_llama_cpp (tiny fixtures, the header-only
        # Qwen2.5-7B, Gemma-3-27B and DeepSeek-V2-Lite), test_every_cache_type_matches_llama_cpp and
        # test_embedded_model_kv_matches_llama_cpp (SmolLM2, a llama; the "mistral" fixture is one too)
        "llama",
        "mistral3",
        "qwen2",
        "qwen3",
        "qwen3moe",
        "gemma2",
        "gemma3",
        "phi3",
        "deepseek2",
        "gpt-oss",
        # tests/planner/test_kv_deepseek4.py: 540 real CPU allocations, part by part (MTP drafting:
        # test_kv_mtp_draft.py; per device on Vulkan: tests/gpu/test_vulkan_kv_parts.py)
        "deepseek4",
        # tests/planner/test_kv_deepseek32.py: 240 real CPU allocations, MLA and indexer (Vulkan too)
        "deepseek32",
    }
)

# LLM_ARCH_NAMES in the vendored llama.cpp (llama-cpp-python 0.3.36, vendor/llama.cpp/src/llama-arch.cpp),
# in its order, less "(unknown)". No runtime API lists them, so they are kept here; "clip" is a dummy
# llama-quantize uses, not a model llama.cpp can run.
LLAMA_CPP_ARCHITECTURES = (
    "clip",
    "llama",
    "llama4",
    "deci",
    "falcon",
    "grok",
    "gpt2",
    "gptj",
    "gptneox",
    "mpt",
    "baichuan",
    "starcoder",
    "refact",
    "bert",
    "modern-bert",
    "nomic-bert",
    "nomic-bert-moe",
    "neo-bert",
    "jina-bert-v2",
    "jina-bert-v3",
    "eurobert",
    "bloom",
    "stablelm",
    "qwen",
    "qwen2",
    "qwen2moe",
    "qwen2vl",
    "qwen3",
    "qwen3moe",
    "qwen3next",
    "qwen3vl",
    "qwen3vlmoe",
    "qwen35",
    "qwen35moe",
    "qwen4exp",
    "phi2",
    "phi3",
    "phimoe",
    "plamo",
    "plamo2",
    "plamo3",
    "codeshell",
    "orion",
    "internlm2",
    "minicpm",
    "minicpm3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3n",
    "gemma4",
    "gemma4-assistant",
    "gemma-embedding",
    "starcoder2",
    "mamba",
    "mamba2",
    "maple",
    "jamba",
    "falcon-h1",
    "xverse",
    "command-r",
    "cohere2",
    "cohere2moe",
    "dbrx",
    "olmo",
    "olmo2",
    "olmoe",
    "muse-glimmer",
    "openelm",
    "arctic",
    "deepseek",
    "deepseek2",
    "deepseek2-ocr",
    "deepseek32",
    "deepseek4",
    "chatglm",
    "glm4",
    "glm4moe",
    "glm-dsa",
    "bitnet",
    "t5",
    "t5encoder",
    "jais",
    "jais2",
    "nemotron",
    "nemotron_h",
    "nemotron_h_moe",
    "exaone",
    "exaone4",
    "exaone-moe",
    "rwkv6",
    "rwkv6qwen2",
    "rwkv7",
    "arwkv7",
    "granite",
    "granitemoe",
    "granitehybrid",
    "graniteswitch",
    "granite_swa",
    "chameleon",
    "wavtokenizer-dec",
    "plm",
    "bailingmoe",
    "bailingmoe2",
    "bailingmoe3",
    "dots1",
    "dots3note",
    "arcee",
    "afmoe",
    "laguna",
    "ernie4_5",
    "ernie4_5-moe",
    "hunyuan-moe",
    "hunyuan-dense",
    "hunyuan_vl",
    "hy_v3",
    "hy_v4",
    "smollm3",
    "gpt-oss",
    "lfm2",
    "lfm2moe",
    "dream",
    "smallthinker",
    "llada",
    "llada-moe",
    "seed_oss",
    "grovemoe",
    "apertus",
    "minimax-01",
    "hrm_text",
    "minimax-m2",
    "minimax-m3",
    "cogvlm",
    "rnd1",
    "pangu-embedded",
    "mistral3",
    "eagle3",
    "dflash",
    "mistral4",
    "paddleocr",
    "mimo2",
    "step35",
    "spark2_5",
    "llama-embed",
    "maincoder",
    "kimi-linear",
    "kimi-k3",
    "glm5-next",
    "talkie",
    "mellum",
    "nanbeige",
    "qwen3tts",
    "pockettts",
)

COUNTED_BY_LLAMA_CPP = "counted by llama.cpp"


def is_verified(architecture: str) -> bool:
    """True when planner/memory/kv.py's cache formula is exact for this architecture."""
    return architecture in VERIFIED


def is_routed(architecture: str) -> bool:
    """True when the plan asks llama.cpp's dry run for this architecture's cache (and buffers)."""
    return architecture in LLAMA_CPP_ARCHITECTURES and not is_verified(architecture)


def loadable(architecture: str) -> bool:
    """True when the vendored llama.cpp knows this architecture (it refuses every other)."""
    return architecture in LLAMA_CPP_ARCHITECTURES
