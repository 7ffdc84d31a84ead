"""The Hub tab: Hugging Face search, a repository's files rated against this machine's plan, and
downloads; the controller runs them on workers (vrampilot.hub does the work)."""
