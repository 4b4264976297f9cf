"""PROVISIONAL estimator (to be replaced by the fitted one)."""

from __future__ import annotations

import json
import math
import re

MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3
_WORDS = re.compile(r"[A-Za-z0-9]+")
_PUNCT = re.compile(r"[^\sA-Za-z0-9]")


def estimate_text(text: str) -> int:
    if not text:
        return 0
    ascii_alnum = sum(len(w) for w in _WORDS.findall(text))
    non_ascii = len(text.encode()) - len(text.encode("ascii", "ignore"))
    punct = len(_PUNCT.findall(text.encode("ascii", "ignore").decode()))
    return math.ceil(ascii_alnum * 0.3 + punct + non_ascii * 0.7) + 1


def estimate_message(message: dict) -> int:
    content = message.get("content") or ""
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    total = MESSAGE_OVERHEAD + estimate_text(str(content)) + estimate_text(message.get("role", ""))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        total += (
            estimate_text(function.get("name", ""))
            + estimate_text(function.get("arguments", ""))
            + 3
        )
    if message.get("tool_call_id"):
        total += estimate_text(message["tool_call_id"])
    if message.get("name"):
        total += estimate_text(message["name"])
    return total


def estimate_tools(tools: list[dict] | None) -> int:
    if not tools:
        return 0
    return estimate_text(json.dumps(tools)) + 4 * len(tools)
