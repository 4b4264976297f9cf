"""`webapp check-config` for tools: each server connected and its tools listed, and what
their schemas take of each configuration's window, before any user sends.

Schemas go with every model call of a configuration with tools, in the head of the fit
(`webapp.llm.window`): a quarter of the window gone to them is worth a warning, and
schemas that leave no room for a newest turn make the configuration unusable, which is an
error (the check fails).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from webapp.llm.catalog import Catalog
from webapp.llm.estimator import estimate_message, estimate_tools
from webapp.llm.head_room import MESSAGE_ROOM, room_of
from webapp.llm.routing import RoutingError, resolve
from webapp.tools.connections import McpConnections
from webapp.tools.toolset import gather

WARN_SHARE = 0.25
"""Schemas past this share of a configuration's window are reported."""


@dataclass
class ToolReport:
    lines: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Configurations whose schemas leave no room for a newest turn."""


async def check_tools(catalog: Catalog, connections: McpConnections) -> ToolReport:
    report = ToolReport()
    for name, spec in catalog.mcp_servers.items():
        toolset = await gather(connections, (name,), catalog.mcp_servers)
        where = spec.command if spec.transport == "stdio" else spec.url
        listed = ", ".join(tool["function"]["name"] for tool in toolset.tools) or "none"
        report.lines.append(f"  mcp server {name!r} ({spec.transport}, {where}): tools {listed}")
        report.lines += [f"    warning: {fault}" for fault in toolset.faults.values()]
    for name, configuration in catalog.configurations.items():
        if not configuration.tools:
            continue
        toolset = await gather(connections, configuration.tools, catalog.mcp_servers)
        try:
            room = room_of(resolve(catalog, name))
        except RoutingError as exc:
            report.lines.append(f"  configuration {name!r}: tools not sized ({exc})")
            continue
        schemas = estimate_tools(toolset.tools)
        share = schemas / room.window
        said = f"  configuration {name!r}: {len(toolset.tools)} tools, schemas {schemas:,} tokens"
        report.lines.append(f"{said} ({share:.0%} of the window of {room.window:,})")
        system = estimate_message({"role": "system", "content": configuration.system_prompt})
        if system + schemas + MESSAGE_ROOM > room.budget:
            report.refused.append(name)
            report.lines.append(
                f"    error: the tools' schemas and the system prompt take more than the "
                f"{room.budget:,} tokens of the prompt's budget (model {room.model}): no room "
                "for a message; offer fewer tools (`tools` of their [[mcp_servers]] entry)"
            )
        elif share > WARN_SHARE:
            report.lines.append(
                "    warning: past a quarter of the window goes to tool schemas on every "
                "send; offer fewer tools (`tools` of their [[mcp_servers]] entry)"
            )
    return report
