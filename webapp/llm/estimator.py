"""The token estimate: errs high for every script and kind of text, stays close on English.

Dividing UTF-8 bytes by a constant undercounts JSON, code, digits, emoji and
Japanese, and overcounts English twice over. This estimate follows how BPE
tokenizers actually cut text: it splits text the way their pre-tokenizers do
(words, digit groups, punctuation runs, whitespace runs) and prices each piece
by what it is: a short ASCII word is one token, a long or mixed-case one (an
identifier, base64) is several; a digit group of up to three is one; each
letter of a script a tokenizer knows less well costs a measured fraction of a
token, fitted so that no sample of our corpus (tests/corpus/estimator) is
under-counted by cl100k, and emoji and other symbols cost what their UTF-8
bytes may cost. Per-model calibration (webapp.llm.calibration) corrects for
tokenizers that count more than this.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs beyond its content: role and separators."""
REPLY_PRIMING = 3
"""Tokens that prime the reply, once per request."""
TOOL_OVERHEAD = 8
"""Tokens each tool definition costs beyond its JSON (the provider's own framing)."""

_PIECES = re.compile(
    r"""
      (?P<blob>(?=[\w+/=-]*\d)(?=[\w+/=-]*[A-Za-z])[A-Za-z0-9+/=_-]{16,})
    | (?P<ascii>[A-Za-z]+)
    | (?P<letters>[^\W\d_]+)
    | (?P<digits>\d+)
    | (?P<newlines>\s*[\r\n]\s*)
    | (?P<spaces>[ \t]+)
    | (?P<punct>[!-/:-@\[-`{-~]+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_CASE_CHANGES = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")

# Tokens per character of a letter run, by script (the highest a script block shows).
_SCRIPT_COST: tuple[tuple[int, int, float], ...] = (
    (0x00C0, 0x024F, 0.70),  # Latin with diacritics
    (0x0370, 0x03FF, 0.90),  # Greek
    (0x0400, 0x052F, 0.70),  # Cyrillic
    (0x0590, 0x05FF, 0.95),  # Hebrew
    (0x0600, 0x06FF, 0.95),  # Arabic
    (0x0900, 0x0DFF, 1.6),  # Devanagari and the other Indic scripts
    (0x0E00, 0x0E7F, 1.00),  # Thai
    (0x3040, 0x30FF, 1.2),  # Hiragana, Katakana
    (0x3400, 0x9FFF, 1.45),  # CJK ideographs
    (0xAC00, 0xD7AF, 1.7),  # Hangul
)
_UNKNOWN_SCRIPT_COST = 1.5


def _letter_cost(char: str) -> float:
    code = ord(char)
    for low, high, cost in _SCRIPT_COST:
        if low <= code <= high:
            return cost
    return _UNKNOWN_SCRIPT_COST


def _ascii_word(word: str) -> float:
    """English words up to 6 letters are a single token; longer ones and identifiers that
    change case (camelCase, base64) are cut into pieces of about four letters."""
    if len(word) > 12:  # compounds, repeated letters ("hahahaha"): tokenizers cut them small
        return len(word) / 2.2
    pieces = 1 + max(0, len(word) - 6) / 2.8
    if len(word) >= 4 and word[0].isupper():
        pieces += 0.8  # capitalised words (German nouns, names) are rarer whole tokens
    return pieces + len(_CASE_CHANGES.findall(word)) * 1.5


def _other_cost(char: str) -> float:
    """Emoji, symbols, marks: byte-level tokenizers may spend up to a token per byte."""
    size = len(char.encode("utf-8", "surrogatepass"))
    if size == 1:
        return 1.0
    if 0x0300 <= ord(char) <= 0x036F or 0x0900 <= ord(char) <= 0x0DFF:
        return 1.0  # combining marks, Indic vowel signs
    return 0.75 * size


def estimate_text(text: str) -> int:
    """Tokens `text` may cost, erring high."""
    if not text:
        return 0
    total = 0.0
    for match in _PIECES.finditer(text):
        kind = match.lastgroup
        piece = match.group()
        if kind == "blob":
            total += len(piece) * 0.75  # base64, hashes, ids: tokenizers see no words there
        elif kind == "ascii":
            total += _ascii_word(piece)
        elif kind == "letters":
            cost = sum(_letter_cost(char) for char in piece)
            if len(set(piece)) * 3 < len(piece):  # "аааааа", "哈哈哈哈": no merges to be had
                cost = max(cost, float(len(piece)))
            total += cost
        elif kind == "digits":
            total += math.ceil(len(piece) / 3)
        elif kind == "newlines":
            total += 1 + piece.count("\n") * 0.25 + len(piece) / 16
        elif kind == "spaces":
            # One space before a word or punctuation is part of its token; before a digit,
            # a line break or the end, it is a token of its own.
            follows = text[match.end() : match.end() + 1]
            free = piece == " " and bool(follows) and not (follows.isdigit() or follows.isspace())
            total += 0.0 if free else 1 + len(piece) / 8
        elif kind == "punct":
            total += 0.4 + 0.6 * len(piece)
        else:
            total += _other_cost(piece)
    return math.ceil(total) + 2


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content, ensure_ascii=False)


def estimate_message(message: dict[str, Any]) -> int:
    """Tokens a chat message may cost on the wire: its overhead, role, content, name,
    tool calls (name and arguments) and tool-call id."""
    total = MESSAGE_OVERHEAD + estimate_text(str(message.get("role", "")))
    total += estimate_text(_content_text(message.get("content")))
    if message.get("name"):
        total += estimate_text(str(message["name"]))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        total += 3 + estimate_text(str(function.get("name", "")))
        total += estimate_text(str(function.get("arguments", "")))
    if message.get("tool_call_id"):
        total += estimate_text(str(message["tool_call_id"]))
    return total


def estimate_tools(tools: list[dict[str, Any]] | None) -> int:
    """Tool schemas as they are sent: their JSON, plus each tool's framing."""
    if not tools:
        return 0
    return estimate_text(json.dumps(tools)) + TOOL_OVERHEAD * len(tools)
