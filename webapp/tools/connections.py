"""One open MCP session per server, shared by every call of this process.

Why held open: a stdio server is a process that takes a second or more to start, and a
turn may call it several times. Why a task of its own: the `mcp` client is an anyio
context whose task group belongs to the task that entered it, so a holder task enters it
and keeps it until the app stops, while calls from any request use the session (the MCP
protocol numbers its requests, so concurrent calls share it). A session that fails is
dropped: the next call starts the server again.

A stdio server gets the variables its entry's `env_from` names and the `mcp` package's
own minimal set (PATH, HOME and the like); never the app's other variables, so never the
app's secrets. Every wait is bounded by the server's `timeout`: the event loop only ever
awaits the server's I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TextIO

import httpx2
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Tool

from webapp.llm.catalog import McpServerSpec
from webapp.tasks import cancel
from webapp.tools.outcomes import ToolOutcome, answered, stub

log = logging.getLogger(__name__)


class ServerFault(Exception):
    """A server could not be reached or used; the message says why, in words for a person."""


def fault_text(exc: BaseException) -> str:
    """One line for an exception from inside the `mcp` package, whose anyio task groups
    wrap what went wrong in exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _resolve(names: Mapping[str, str], environ: Mapping[str, str], what: str) -> dict[str, str]:
    missing = sorted(source for source in names.values() if source not in environ)
    if missing:
        raise ServerFault(f"environment variable {', '.join(missing)} for its {what} is not set")
    return {key: environ[source] for key, source in names.items()}


@contextmanager
def _server_log() -> Iterator[TextIO]:
    """Where a stdio server's own log goes: the process's real stderr (the admin's log),
    even while `sys.stderr` is replaced by something without a file descriptor."""
    real = sys.__stderr__
    try:
        usable = real is not None and real.fileno() >= 0
    except (OSError, ValueError):
        usable = False
    if usable and real is not None:
        yield real
        return
    with open(os.devnull, "w") as devnull:
        yield devnull


@asynccontextmanager
async def _opened(spec: McpServerSpec, environ: Mapping[str, str]) -> AsyncIterator[Client]:
    """A connected client for `spec` (no response cache: a tool's answer is never reused)."""
    if spec.transport == "stdio":
        env = _resolve(spec.env_from, environ, "env_from")
        params = StdioServerParameters(command=spec.command or "", args=list(spec.args), env=env)
        with _server_log() as errlog:
            transport = stdio_client(params, errlog=errlog)
            async with Client(transport, cache=None, read_timeout_seconds=spec.timeout) as client:
                yield client
        return
    headers = _resolve(spec.headers_from, environ, "headers_from")
    async with httpx2.AsyncClient(headers=headers, timeout=spec.timeout) as http:
        transport = streamable_http_client(spec.url or "", http_client=http)
        async with Client(transport, cache=None, read_timeout_seconds=spec.timeout) as client:
            yield client


class _Held:
    """A session kept open by its own task until `close`."""

    def __init__(self, spec: McpServerSpec, environ: Mapping[str, str]) -> None:
        self.spec = spec
        self.client: Client | None = None
        self.fault: str | None = None
        self._ready, self._closing = asyncio.Event(), asyncio.Event()
        self._task = asyncio.create_task(self._hold(environ), name=f"mcp {spec.name}")

    async def _hold(self, environ: Mapping[str, str]) -> None:
        try:
            async with _opened(self.spec, environ) as client:
                self.client = client
                self._ready.set()
                await self._closing.wait()
        except Exception as exc:  # the server's fault, kept as a value for its callers
            self.fault = fault_text(exc)
            log.warning("MCP server %r: %s", self.spec.name, self.fault)
        finally:
            self.client = None
            self._ready.set()

    @property
    def started(self) -> bool:
        """Whether the start is over (well or not); until then callers wait for it."""
        return self._ready.is_set()

    async def ready(self) -> Client:
        """The open client, or ServerFault; waits at most the server's timeout."""
        try:
            await asyncio.wait_for(self._ready.wait(), self.spec.timeout)
        except TimeoutError:
            self.fault = f"did not start within {self.spec.timeout:g} s"
        if self.client is None:
            raise ServerFault(self.fault or "the connection closed")
        return self.client

    @property
    def alive(self) -> bool:
        return self.client is not None and not self._task.done()

    async def close(self) -> None:
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.spec.timeout)
        except TimeoutError:
            await cancel(self._task)


class McpConnections:
    """The process's MCP sessions, by server name; `aclose` ends them at shutdown."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        self._held: dict[str, _Held] = {}
        self._lock = asyncio.Lock()

    async def _client(self, spec: McpServerSpec) -> Client:
        async with self._lock:  # one start per server, however many calls wait for it
            held = self._held.get(spec.name)
            if held is None or held.spec != spec or not (held.alive or not held.started):
                if held is not None:
                    await held.close()
                held = self._held[spec.name] = _Held(spec, self._environ)
        try:
            return await held.ready()
        except ServerFault:
            await self._drop(held)
            raise

    async def _drop(self, held: _Held) -> None:
        if self._held.get(held.spec.name) is held:
            del self._held[held.spec.name]
        await held.close()

    async def list_tools(self, spec: McpServerSpec) -> list[Tool]:
        """Every tool the server lists (all pages); ServerFault when it cannot say."""
        client = await self._client(spec)
        tools: list[Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout(spec.timeout):
                while True:
                    page = await client.list_tools(cursor=cursor)
                    tools += page.tools
                    if not (cursor := page.next_cursor):
                        return tools
        except Exception as exc:
            await self._drop_by_name(spec)
            raise ServerFault(fault_text(exc)) from exc

    async def call(self, spec: McpServerSpec, tool: str, arguments: str) -> ToolOutcome:
        """Run `tool` with the model's `arguments` (a JSON object as text); whatever happens
        is the outcome, a stub when there is no result."""
        try:
            parsed: Any = json.loads(arguments or "{}")
        except ValueError:
            return stub(tool, "failed", "its arguments were not valid JSON")
        if not isinstance(parsed, dict):
            return stub(tool, "failed", "its arguments were not a JSON object")
        try:
            client = await self._client(spec)
        except ServerFault as exc:
            return stub(tool, "failed", f"server '{spec.name}' is unavailable ({exc})")
        try:
            async with asyncio.timeout(spec.timeout):
                result = await client.call_tool(tool, parsed)
        except TimeoutError:
            await self._drop_by_name(spec)  # a hung server: the next call starts it afresh
            return stub(tool, "timeout", f"no answer within {spec.timeout:g} s")
        except Exception as exc:  # a session that failed once is not trusted again
            await self._drop_by_name(spec)
            return stub(tool, "failed", fault_text(exc))
        return answered(list(result.content), bool(result.is_error), spec.max_result_tokens)

    async def _drop_by_name(self, spec: McpServerSpec) -> None:
        async with self._lock:
            if (held := self._held.get(spec.name)) is not None:
                await self._drop(held)

    async def aclose(self) -> None:
        """End every session (the app is stopping)."""
        async with self._lock:
            held, self._held = list(self._held.values()), {}
        for each in held:
            with contextlib.suppress(Exception):
                await each.close()


@asynccontextmanager
async def connecting(environ: Mapping[str, str] | None = None) -> AsyncIterator[McpConnections]:
    """Connections for a block (the CLI's check, a test): closed when it ends."""
    connections = McpConnections(environ)
    try:
        yield connections
    finally:
        await connections.aclose()
