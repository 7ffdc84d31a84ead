"""The window's part of the agents (vrampilot.agents): the MCP servers view, the tool calls in the
chat's transcript, and the approval asked before each call. The servers and the loop are the core's;
this package presents them and asks the user."""
