"""Planner: memory model, speed model, settings search, reasons, in rooms with floors of their own
(a layers contract in pyproject.toml keeps every arrow pointing down):

- search/       choose settings (choose.py `plan`), alternatives, reasons, the explanation, drafts,
                verifying a plan, the cache table: the front ends' way in
- calibration, knobs, fit: what replies teach the speed model, the table of plan knobs, a plan's fit in one word
- plan.py       the plan's types (Pins, Plan, DraftPlan, Alternative) and the bounds a plan is checked against
- speed_model/  predicted speed (predict.py) from the CPU's rates, the graph's factors and the card
- dry_run/      llama.cpp's own answer: a configuration loaded without allocating, its buffers parsed
- memory/       the one memory model, entered through breakdown.py `memory_breakdown`; the KV cache,
                the compute buffers, placement, the projector and llama-server's host RAM behind it
- settings, target, errors, families, context_budget: the root types every room names
"""
