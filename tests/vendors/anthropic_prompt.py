"""A Messages API prompt as Anthropic checks, counts and caches it: tools, system and each
message's content blocks, `cache_control` breakpoints looked up and written."""

from __future__ import annotations

import json
from typing import Any

from tests.vendors.cache import CacheEvent, _Blocks
from tests.vendors.controls import Controls
from tests.vendors.faults import _Invalid
from tests.vendors.media import picture_or_document, picture_tokens
from tests.vendors.rules import (
    ANTHROPIC_VISION,
    BLOCK_FRAME,
    LOOKBACK,
    MAX_BREAKPOINTS,
    MESSAGE_FRAME,
)


class AnthropicPrompt(Controls):
    """How the fake reads an Anthropic prompt."""

    def _text_tokens(self, text: Any) -> int:
        return self.count(text if isinstance(text, str) else json.dumps(text))

    def _anthropic_blocks(self, body: dict[str, Any]) -> _Blocks:
        """The prompt as blocks (tools, system, each message's content blocks), checked
        the way the Messages API checks it."""
        blocks = _Blocks()
        tools = body.get("tools") or []
        if not isinstance(tools, list):
            raise _Invalid("tools: Input should be a valid list")
        for number, tool in enumerate(tools):
            if not isinstance(tool, dict) or not tool.get("name") or "input_schema" not in tool:
                raise _Invalid(f"tools.{number}.custom.input_schema: Field required")
            shown = {k: v for k, v in tool.items() if k != "cache_control"}
            blocks.add(["tool", shown], self._text_tokens(shown), "cache_control" in tool)
        system = body.get("system")
        if isinstance(system, str):
            system = [{"type": "text", "text": system}] if system else []
        if system is not None and not isinstance(system, list):
            raise _Invalid("system: Input should be a valid string or list")
        for part in system or []:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _Invalid("system: only text blocks are accepted")
            blocks.add(
                ["system", part.get("text")],
                self._text_tokens(part.get("text")) + MESSAGE_FRAME,
                "cache_control" in part,
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Invalid("messages: at least one message is required")
        pending_tools: set[str] = set()
        for number, message in enumerate(messages):
            if not isinstance(message, dict):
                raise _Invalid(f"messages.{number}: Input should be a valid dictionary")
            role = message.get("role")
            if role not in ("user", "assistant", "system"):
                raise _Invalid(
                    f"messages.{number}.role: Input should be 'user', 'assistant' or 'system'"
                )
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if not isinstance(content, list) or not content:
                raise _Invalid(f"messages.{number}: all messages must have non-empty content")
            results = {
                b.get("tool_use_id")
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            }
            if pending_tools and not pending_tools <= results:
                raise _Invalid(
                    f"messages.{number}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(pending_tools - results))}. Each "
                    "`tool_use` block must have a corresponding `tool_result` block in the "
                    "next message."
                )
            pending_tools = set()
            if not tools and any(
                isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result")
                for b in content
            ):
                raise _Invalid(
                    "Requests which include `tool_use` or `tool_result` blocks must define tools."
                )
            frame = MESSAGE_FRAME
            for index, block in enumerate(content):
                if not isinstance(block, dict):
                    raise _Invalid(f"messages.{number}.content.{index}: Input should be an object")
                kind = block.get("type")
                if kind == "text":
                    text = block.get("text")
                    if not isinstance(text, str) or not text.strip():
                        raise _Invalid(
                            f"messages.{number}.content.{index}.text: text content blocks "
                            "must contain non-whitespace text"
                        )
                    tokens = self.count(text)
                    key: Any = [role, "text", text]
                elif kind == "tool_use" and role == "assistant":
                    if not isinstance(block.get("input"), dict) or not block.get("id"):
                        raise _Invalid(
                            f"messages.{number}.content.{index}.tool_use: id and input are required"
                        )
                    pending_tools.add(str(block["id"]))
                    tokens = (
                        self.count(str(block.get("name")))
                        + self._text_tokens(block["input"])
                        + BLOCK_FRAME
                    )
                    key = [role, "tool_use", block.get("id"), block.get("name"), block["input"]]
                elif kind == "tool_result" and role == "user":
                    tokens = self._text_tokens(block.get("content") or "") + BLOCK_FRAME
                    key = [role, "tool_result", block.get("tool_use_id"), block.get("content")]
                elif kind in ("image", "document") and role == "user":
                    model = body.get("model")
                    if kind == "image" and model not in ANTHROPIC_VISION:
                        raise _Invalid(f"'{model}' does not support image input.")
                    where = f"messages.{number}.content.{index}.{kind}.source"
                    data = picture_or_document(kind, block.get("source"), where)
                    tokens = picture_tokens(data) if kind == "image" else self.count(str(data))
                    key = [role, kind, hash(data)]
                else:
                    raise _Invalid(
                        f"messages.{number}.content.{index}.type: unexpected block type "
                        f"{kind!r} in a {role} message"
                    )
                blocks.add(key, tokens + frame, "cache_control" in block)
                frame = 0
        if pending_tools:
            raise _Invalid(
                "messages: the last assistant message has `tool_use` blocks without results"
            )
        if len(blocks.breakpoints) > MAX_BREAKPOINTS:
            raise _Invalid(
                f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                f"Found {len(blocks.breakpoints)}."
            )
        return blocks

    def _anthropic_cache(self, model: str, blocks: _Blocks) -> tuple[int, int]:
        """(tokens read from the cache, tokens written to it), as Anthropic's prompt cache
        does: each breakpoint looks back up to LOOKBACK blocks for the longest cached
        prefix; the prefix up to each breakpoint is then written."""
        with self._lock:
            cache = self._prompt_cache
            read = 0
            for point in blocks.breakpoints:
                for end in range(point, max(-1, point - LOOKBACK - 1), -1):
                    digest, tokens = blocks.prefix(end)
                    if cache.get(f"{model}:{digest}") is not None:
                        read = max(read, tokens)
                        break
            written = 0
            for point in blocks.breakpoints:
                digest, tokens = blocks.prefix(point)
                if tokens >= self.min_cacheable:
                    cache[f"{model}:{digest}"] = tokens
                    written = max(written, tokens)
            written = max(0, written - read)
            self._cache_log.append(CacheEvent("anthropic", model, blocks.total, read, written))
        return read, written
