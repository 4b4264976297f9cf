"""A real MCP server for the tool tests, built with the `mcp` package's own server: run as
`python tests/mcp_fixture.py stdio` or `python tests/mcp_fixture.py http PORT`.

Its tools are the faults the chat must survive: one that never answers, one that fails,
one that floods, one that ends its own process mid-call, one whose output is markup, and
one that reports which environment variables it was started with, a long report,
one far past any cap and one whose output is malformed (a NUL, bytes posing as a PNG).
Run by path, not as
`tests.…`, because a stdio server gets no PYTHONPATH (only its entry's variables).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from mcp.server.mcpserver import Image, MCPServer

server = MCPServer("fixture", log_level="CRITICAL")


@server.tool()
def echo(text: str) -> str:
    """Say `text` back."""
    return text


@server.tool()
def flood(words: int) -> str:
    """`words` words of output."""
    return "lorem " * words


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def fail() -> str:
    """Fails as a tool does: the server answers with an error."""
    raise ValueError("the fixture fails on purpose")


@server.tool()
def crash() -> str:
    """Ends the server's process in the middle of the call."""
    os._exit(3)


@server.tool()
def markup() -> str:
    """Output that would be live HTML if it were not escaped."""
    return '<script>alert("tool")</script><a href="javascript:alert(1)">click</a>'


@server.tool()
def environment() -> str:
    """The names of the variables the server was started with."""
    return " ".join(sorted(os.environ))


@server.tool()
def report() -> str:
    """A long, fixed report (about 1,500 tokens): what older results are cleared of."""
    return " ".join(f"finding{i}" for i in range(700))


@server.tool()
def huge() -> str:
    """Far more output than any cap (about 60,000 tokens)."""
    return "lorem ipsum " * 20_000


@server.tool()
def garbled() -> Any:
    """Malformed output: text with a NUL byte in it, then bytes that claim to be a PNG."""
    return ["before\x00after", Image(data=b"not a picture", format="png")]


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        app = server.streamable_http_app(stateless_http=True, json_response=True)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
