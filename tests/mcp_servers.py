"""MCP servers for the tool tests: the fixture (tests/mcp_fixture.py) on HTTP in its own
process, and catalog entries for it on stdio and for the registry's `mcp-server-time`; the
fixtures `http_url` and `connections` (registered in tests/conftest.py) for the tool tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from webapp.llm.catalog import McpServerSpec
from webapp.tools.connections import McpConnections, connecting

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


def stdio_fixture_toml(name: str, *lines: str) -> str:
    """A catalog's [[mcp_servers]] entry `name` for the fixture on stdio, with the entry's
    other `lines` (its tools, approval, timeout ...)."""
    head = f'[[mcp_servers]]\nname = "{name}"\ntransport = "stdio"\n'
    head += f'command = "{sys.executable}"\nargs = ["{FIXTURE}", "stdio"]\n'
    return head + "".join(f"{line}\n" for line in lines)


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


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The fixture on HTTP, one process a test module."""
    with http_fixture_served() as url:
        yield url


@pytest.fixture
async def connections() -> AsyncIterator[McpConnections]:
    """A test's own MCP sessions, with no environment to pass on (a module that needs some
    defines its own `connections`)."""
    async with connecting({}) as held:
        yield held
