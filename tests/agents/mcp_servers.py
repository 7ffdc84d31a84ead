"""MCP servers the agent tests run for real (the SDK's own server side, MCPServer), as child
processes over stdio or over streamable HTTP on 127.0.0.1.

`python mcp_servers.py KIND [PORT]`: KIND picks the behaviour:
  good     tools `add`, `echo`, `fail` (an error result), `big` (5 MB of text), `slow` (never answers),
           `crash` (the process exits mid-call)
  clock    one tool without arguments, `clock`, that answers "It is 10:42 in Paris." (the tool a
           real model calls in test_tool_calls_e2e.py: no argument it could get wrong)
  exit     exits at start with a line on stderr
  hang     never answers (reads nothing from stdin)
  http     `good`'s tools over streamable HTTP on 127.0.0.1:PORT (needs the header X-Test-Token: t0k3n)
"""

from __future__ import annotations

import os
import sys
import time


def build() -> object:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("vrampilot-test")

    @server.tool(description="Add two integers and return the sum.")
    def add(a: int, b: int) -> str:
        return str(a + b)

    @server.tool(description="Return the text given, and this process's environment names.")
    def echo(text: str) -> str:
        return f"{text}|env:{','.join(sorted(os.environ))}"

    @server.tool(description="Always fails.")
    def fail() -> str:
        raise ValueError("the disk is on fire")

    @server.tool(description="Returns 5 MB of text.")
    def big() -> str:
        return "x" * (5 << 20)

    @server.tool(description="Never answers.")
    def slow() -> str:
        time.sleep(3600)
        return "late"

    @server.tool(description="Exits mid-call.")
    def crash() -> str:
        os._exit(3)

    return server


def build_clock() -> object:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("vrampilot-clock")

    @server.tool(description="The current time in Paris.")
    def clock() -> str:
        return "It is 10:42 in Paris."

    return server


def main() -> None:
    kind = sys.argv[1]
    if kind == "exit":
        print("fatal: cannot open the database /nowhere/db", file=sys.stderr, flush=True)
        sys.exit(2)
    if kind == "hang":
        time.sleep(3600)
    server = build_clock() if kind == "clock" else build()
    if kind == "http":
        run_http(server, int(sys.argv[2]))
    else:
        server.run()  # type: ignore[attr-defined]  # MCPServer, typed as object above to keep the import lazy


def run_http(server: object, port: int) -> None:
    import uvicorn
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response

    app = server.streamable_http_app()  # type: ignore[attr-defined]

    async def need_token(request: Request, call_next: object) -> Response:
        if request.headers.get("x-test-token") != "t0k3n":
            return PlainTextResponse("no token", status_code=401)
        return await call_next(request)  # type: ignore[operator,no-any-return]

    app.add_middleware(BaseHTTPMiddleware, dispatch=need_token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
