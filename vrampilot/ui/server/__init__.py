"""The Server tab: the bundled llama-server started with the shown plan (vrampilot.server), its
settings, log and state; the chat replies through it while it runs."""
