"""Service tests on the tiny catalog: a 700-token window, so a few turns already trim.

The catalog, the settings mark that puts it under the `settings` and `chat` fixtures
(tests/conftest.py), and the helper that reads turns back out of a request live here.
"""

from __future__ import annotations

import re

import pytest

TINY = """
[[models]]
name = "tiny"
provider = "up"
model_id = "small"
context_window = 700
max_output_tokens = 60

[[configurations]]
name = "tiny"
model = "tiny"
system_prompt = "Be brief."
"""

TINY_SETTINGS = pytest.mark.settings(extra=TINY, stream_flush_interval=0.05, rate_limit_messages=0)
"""The tiny tests' `settings`: the tiny catalog, quick flushes, no rate limit."""


TURN = re.compile(r"turn (\d+):")
"""How the tests' user messages begin: `turn N:`."""


def turn_number(content: str) -> int:
    """N of a user message that begins `turn N:`."""
    match = TURN.match(content)
    assert match is not None, f"not a numbered turn: {content[:40]!r}"
    return int(match.group(1))


def received_turns(request: dict) -> set[int]:
    """The turn numbers a chat request carried (every user message says 'turn N:')."""
    found = set()
    for message in request["body"]["messages"]:
        match = TURN.match(str(message.get("content") or ""))
        if message["role"] == "user" and match:
            found.add(int(match.group(1)))
    return found
