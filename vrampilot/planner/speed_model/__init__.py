"""The predicted speed of a plan: decode and prefill (predict.py) from the rates this machine's CPU
kernels reach (cpu_speed.py), the whole graph's cost beyond them (graph_factors.py) and the card's
bandwidth, and where each figure came from (basis.py). What was measured lives in vrampilot.speed."""
