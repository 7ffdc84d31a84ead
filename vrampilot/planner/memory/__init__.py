"""The one memory model: bytes per component and device for a model, its settings and its target.

Its way in is `breakdown.memory_breakdown(spec, settings, target)`; the KV cache (kv.py), the
compute and output buffers (compute.py), which weights stay on the host (placement.py), the vision
projector (projector.py) and llama-server's host RAM (server_host.py) are its parts, and they call
each other only inside this room. The rooms above name a part directly where they ask that part's
own question (a cache type's refusal, a placement's check, the context a model's RoPE allows).
"""
