"""OpenAI's message shapes, read for translation: the pipeline speaks them, and a provider
reads a transcript's content, tool calls and tool declarations through these whatever
format it sends on. Nothing here touches the wire."""

from __future__ import annotations

import json
from typing import Any


def content_text(content: Any) -> str:
    """OpenAI message content as text: a string, or the text of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content)


def tool_arguments(raw: Any) -> dict[str, Any]:
    """An OpenAI tool call's `arguments` (a JSON string) as the object the native APIs
    want (`tool_use.input`, `functionCall.args`): what is not an object is wrapped."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"value": value}


def declared_functions(
    tools: list[dict[str, Any]] | None,
) -> list[tuple[dict[str, Any], Any]]:
    """The functions OpenAI-shaped `tools` declare, each as (its name and, when it has one,
    its description; its JSON Schema `parameters` or None): every native API declares a
    function by the same two fields and only names its schema field its own way. A tool
    without a named function is left out, as no vendor would take it."""
    declared = []
    for tool in tools or []:
        function = tool.get("function")
        if not isinstance(function, dict) or not function.get("name"):
            continue
        entry: dict[str, Any] = {"name": function["name"]}
        if function.get("description"):
            entry["description"] = function["description"]
        declared.append((entry, function.get("parameters")))
    return declared
