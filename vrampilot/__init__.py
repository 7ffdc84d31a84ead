"""VRAM Pilot: plan, run and explain local GGUF models on the machine you have."""

__version__ = "0.1.0"
