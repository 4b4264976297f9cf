"""Service tests on the tiny catalog: a 700-token window, so a few turns already trim.

The catalog and the helper that reads turns back out of a request live here; the
`settings` and `chat` fixtures built on them live in this folder's conftest, so each
test module takes them by name without importing (and shadowing) them.
"""

from __future__ import annotations

import re

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


def received_turns(request: dict) -> set[int]:  # type: ignore[type-arg]
    """The turn numbers a chat request carried (every user message says 'turn N:')."""
    found = set()
    for message in request["body"]["messages"]:
        match = re.match(r"turn (\d+):", str(message.get("content") or ""))
        if message["role"] == "user" and match:
            found.add(int(match.group(1)))
    return found
