"""The hint after a name nothing knows: the catalog's keys, sections and references, and the
tokenizer setting's kinds and encodings (webapp.llm.tokenizer_settings), below both."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for the closest choice, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
