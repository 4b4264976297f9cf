"""A configuration's tools as the model is offered them, and which server runs each.

Tools are offered under their own names, in the OpenAI wire form the providers translate
(`{"type": "function", "function": {name, description, parameters}}`). A server that
cannot be listed is left out of this send with its fault kept, so the chat goes on without
its tools; a name offered by two servers goes to the first listed (the second is a fault
`check-config` reports).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.types import Tool

from webapp.llm.catalog import McpServerSpec
from webapp.tools.connections import McpConnections, ServerFault


@dataclass(frozen=True)
class Toolset:
    tools: list[dict[str, Any]] = field(default_factory=list)
    """The definitions sent with each model call (counted in the head of the fit)."""
    servers: dict[str, McpServerSpec] = field(default_factory=dict)
    """Tool name -> the server that runs it."""
    faults: dict[str, str] = field(default_factory=dict)
    """Server name -> why its tools are not offered."""

    def __bool__(self) -> bool:
        return bool(self.tools)


def definition(tool: Tool) -> dict[str, Any]:
    """One tool as the model is offered it."""
    function = {"name": tool.name, "description": tool.description or ""}
    return {"type": "function", "function": function | {"parameters": tool.input_schema}}


async def gather(
    connections: McpConnections, names: tuple[str, ...], catalog: Mapping[str, McpServerSpec]
) -> Toolset:
    """The tools of the servers `names` (a configuration's `tools`), listed concurrently."""
    specs = [catalog[name] for name in names if name in catalog]
    listed = await asyncio.gather(
        *(connections.list_tools(spec) for spec in specs), return_exceptions=True
    )
    toolset = Toolset()
    for name in names:
        if name not in catalog:
            toolset.faults[name] = "no longer in the catalog"
    for spec, tools in zip(specs, listed, strict=True):
        if isinstance(tools, ServerFault):
            toolset.faults[spec.name] = str(tools)
            continue
        if isinstance(tools, BaseException):
            raise tools
        for tool in tools:
            if spec.tools is not None and tool.name not in spec.tools:
                continue
            if (other := toolset.servers.get(tool.name)) is not None:
                toolset.faults[spec.name] = f"tool '{tool.name}' is also offered by '{other.name}'"
                continue
            toolset.servers[tool.name] = spec
            toolset.tools.append(definition(tool))
        missing = sorted(set(spec.tools or ()) - {tool.name for tool in tools})
        if missing:
            toolset.faults[spec.name] = f"lists no tool {', '.join(map(repr, missing))}"
    return toolset
