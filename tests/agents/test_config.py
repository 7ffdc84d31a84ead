"""mcp.json as people paste it (Claude Desktop, Cursor, LM Studio), our keys beside theirs, and one
line naming the server and field for each mistake; approvals kept per server and tool; tool names
as the model sees them; results cut with a note; tool rounds kept in the history and exported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vrampilot.agents import (
    ApprovalPolicy,
    McpConfigError,
    ToolCatalog,
    ToolInfo,
    load_config,
    parse_config,
    save_config,
)
from vrampilot.message import fit_tool_result
from vrampilot.storage import ChatStore, ConversationService
from vrampilot.tool_turn import ToolRound, ToolStep

CLAUDE_DESKTOP = """{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret"},
      "autoApprove": []
    },
    "remote": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer s3cr3t"}, "type": "http"},
    "off": {"command": "x", "disabled": true, "allowedTools": ["a"]}
  }
}"""


def test_a_pasted_claude_desktop_config_reads_and_round_trips(tmp_path: Path) -> None:
    cfg = parse_config(CLAUDE_DESKTOP)
    assert [s.name for s in cfg.servers] == ["filesystem", "github", "remote", "off"]
    fs, gh, remote, off = cfg.servers
    assert fs.transport == "stdio" and fs.args[-1] == "/Users/me/Desktop"
    assert gh.env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret"} and gh.extra == {"autoApprove": []}
    assert remote.transport == "http" and remote.headers["Authorization"] == "Bearer s3cr3t"
    assert (
        off.disabled
        and off.allowed_tools == ("a",)
        and [s.name for s in cfg.enabled()] == ["filesystem", "github", "remote"]
    )
    # Secrets never in what is shown or logged.
    assert "s3cr3t" not in remote.describe() + repr(remote) and "ghp_secret" not in gh.describe() + repr(gh)
    path = save_config(cfg, tmp_path / "mcp.json")
    again = load_config(path)
    assert again.to_json() == cfg.to_json()
    assert json.loads(path.read_text())["mcpServers"]["github"]["autoApprove"] == []  # other hosts' keys kept


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "is not valid JSON"),
        ('{"mcpServers": []}', '"mcpServers" must be an object'),
        ('{"mcpServers": {"a": {}}}', 'server "a": needs "command"'),
        ('{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}', 'server "a": has both'),
        ('{"mcpServers": {"b": {"command": "x", "args": "--flag"}}}', 'server "b": "args" must be a list'),
        ('{"mcpServers": {"c": {"command": "x", "env": {"K": 1}}}}', 'server "c": "env" must be an object of text'),
        ('{"mcpServers": {"d": {"url": "ftp://h"}}}', 'server "d": "url" must start with http'),
        ('{"mcpServers": {"e": {"command": "x", "disabled": "yes"}}}', 'server "e": "disabled" must be true or false'),
        ('{"mcpServers": {"f": {"command": "x", "allowedTools": "all"}}}', 'server "f": "allowedTools" must be a list'),
    ],
)
def test_a_malformed_config_is_one_line_naming_the_server_and_field(text: str, says: str) -> None:
    with pytest.raises(McpConfigError) as e:
        parse_config(text, Path("/x/mcp.json"))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_missing_default_config_is_empty_and_a_named_one_is_an_error(tmp_path: Path) -> None:
    assert load_config(tmp_path / "mcp.json").servers == ()
    with pytest.raises(McpConfigError, match="no such file"):
        load_config(tmp_path / "mine.json", missing_ok=False)


def test_always_allow_is_kept_per_server_and_tool_and_a_damaged_file_allows_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tool-approvals.json"
    policy = ApprovalPolicy(path)
    policy.remember("files", "read")
    again = ApprovalPolicy(path)
    assert again.always_allowed("files", "read")
    assert not again.always_allowed("files", "write") and not again.always_allowed("other", "read")
    again.forget("files", "read")
    assert not ApprovalPolicy(path).always_allowed("files", "read")
    path.write_text('{"always": "everything"}')
    assert ApprovalPolicy(path).entries() == []


def test_tool_names_are_unique_and_safe_across_servers() -> None:
    schema = {"type": "object", "properties": {}}
    catalog = ToolCatalog.build(
        [
            ToolInfo("github", "search", "", schema),
            ToolInfo("docs", "search", "", schema),
            ToolInfo("docs", "read page!", "", schema),
            ToolInfo("docs", "delete", "", schema, allowed=False),
        ]
    )
    assert sorted(catalog.offered) == ["docs__search", "github__search", "read_page_"]
    assert list(catalog.refused) == ["delete"]
    assert [t["function"]["name"] for t in catalog.api_tools()] == list(catalog.offered)
    assert catalog.matches("github__search", "github/search") and catalog.matches("read_page_", "read page!")
    assert not catalog.matches("docs__search", "github/search")


def test_a_result_over_its_budget_is_cut_with_a_note() -> None:
    assert fit_tool_result("short", 100, len).text == "short"
    cut = fit_tool_result("x" * (5 << 20), 1000, len, tool="the tool big", unit="characters")
    assert cut.cut and cut.text.startswith("x" * 800) and len(cut.text) <= 1000
    assert "the tool big returned 5,242,880 characters; the model sees the first" in cut.text


def test_tool_rounds_are_kept_in_the_history_given_back_to_the_model_and_exported(tmp_path: Path) -> None:
    service = ConversationService(ChatStore(tmp_path / "chats.sqlite3"))
    chat = service.create(model_path=None)
    service.ask(chat.id, "What is 2+3?")
    step = ToolStep("c1", "add", "calc", '{"a": 2, "b": 3}', "5", False, 0.25, "allowed", 1)
    evil = ToolStep("c2", "read", "files", "{}", "```\n<script>alert(1)</script>", False, 0.1, "policy", 30)
    service.add_tool_round(chat.id, ToolRound("", (step, evil)))
    service.add_reply(chat.id, "It is 5.")
    service.store.close()

    reopened = ConversationService(ChatStore(tmp_path / "chats.sqlite3"))
    msgs = reopened.for_model(chat.id)
    assert [m.role for m in msgs] == ["user", "assistant", "tool", "tool", "assistant"]
    assert msgs[1].tool_calls[0].name == "add" and msgs[2].tool_call_id == "c1" and msgs[2].content == "5"
    assert msgs[1].as_dict()["tool_calls"][0]["function"]["arguments"] == '{"a": 2, "b": 3}'
    exported = json.loads(reopened.export_text(chat.id, "json"))
    assert exported["messages"][1]["tool_calls"][0]["result"] == "5"
    md = reopened.export_text(chat.id, "markdown")
    assert "calc/add" in md and "````\n```\n<script>" in md  # a result's own fence cannot close ours
    # Regenerate drops the answer and the calls that led to it.
    assert reopened.drop_last_reply(chat.id)
    assert [m.role for m in reopened.for_model(chat.id)] == ["user"]
