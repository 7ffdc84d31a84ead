"""What the tests and the benchmarks both build on, so that neither imports the other.

GGUF files written with the `gguf` package (`gguf_models`), the NVML double (`fake_nvml`) and
ready-made machines (`machines`). Not shipped: the wheel and the installers take `vrampilot*` only.
"""
