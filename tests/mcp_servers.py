"""MCP servers for the tool tests: the fixture (tests/mcp_fixture.py) on HTTP in its own
process, and catalog entries for it on stdio and for the registry's `mcp-server-time`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from webapp.llm.catalog import McpServerSpec

FIXTURE = Path(__file__).resolve().parent / "mcp_fixture.py"
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")
"""The registry's server, installed by the test extra beside this interpreter."""


def time_server(**fields: object) -> McpServerSpec:
    return McpServerSpec.model_validate(
        {"name": "time", "transport": "stdio", "command": TIME_SERVER, "timeout": 20.0} | fields
    )


def stdio_fixture(**fields: object) -> McpServerSpec:
    entry: dict[str, object] = {"name": "local", "transport": "stdio"}
    entry |= {"command": sys.executable, "args": (str(FIXTURE), "stdio"), "timeout": 20.0}
    return McpServerSpec.model_validate(entry | fields)


def http_fixture(url: str, **fields: object) -> McpServerSpec:
    entry = {"name": "remote", "transport": "http", "url": url, "timeout": 5.0}
    return McpServerSpec.model_validate(entry | fields)


@contextmanager
def http_fixture_served() -> Iterator[str]:
    """The fixture on HTTP on a free port; yields its MCP endpoint once it accepts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, str(FIXTURE), "http", str(port)])
    try:
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)  # polling for the port to open: a condition, not a delay
        else:
            raise RuntimeError(f"the MCP fixture did not start (exit {process.poll()})")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()  # not terminate: uvicorn would wait for the call that hangs
        process.wait(timeout=10)
