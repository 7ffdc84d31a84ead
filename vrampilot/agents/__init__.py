"""Agents: MCP servers the user configured (config.py), connected off the GUI thread (client.py),
their tools offered to the model (catalog.py), each call approved by the user (policy.py), and
the loop that runs a tool-using chat through llama-server (loop.py). Qt-free: the window and the
CLI call the same objects. docs/agents.md says what is sent where."""

from vrampilot.agents.catalog import ToolCatalog
from vrampilot.agents.client import McpManager, ServerStatus, State, ToolInfo, ToolOutcome
from vrampilot.agents.config import (
    McpConfig,
    McpConfigError,
    ServerEntry,
    default_config_path,
    load_config,
    parse_config,
    save_config,
)
from vrampilot.agents.loop import ApprovalRequest, Approver, LoopResult, ToolLoop
from vrampilot.agents.policy import ApprovalPolicy, Decision

__all__ = [
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approver",
    "Decision",
    "LoopResult",
    "McpConfig",
    "McpConfigError",
    "McpManager",
    "ServerEntry",
    "ServerStatus",
    "State",
    "ToolCatalog",
    "ToolInfo",
    "ToolLoop",
    "ToolOutcome",
    "default_config_path",
    "load_config",
    "parse_config",
    "save_config",
]
