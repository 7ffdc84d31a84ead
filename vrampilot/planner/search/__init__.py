"""The search and what it says: choose what the user did not pin (choose.py `plan`), the
alternatives beside a plan, the reasons and the explanation, speculative decoding's draft, a plan
verified against llama.cpp, and the cache table. The top floor of the planner: the front ends
come in here."""
