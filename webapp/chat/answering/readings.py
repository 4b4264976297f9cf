"""An engine's reading of the prompt, carried in notices to the workers that follow the
answer without running it.

The worker that runs an answer hears the engine's prefill progress (llama.cpp's
`prompt_progress`) and shows it on its own pages and in the API's `progress` events. A page
served by another worker follows the answer through the database's notices
(`webapp.chat.answering.notify`); the row says nothing of the reading, so the writer
announces it too, at the pace of its text notices: "progress [[answer, processed, total,
cached], ...]". A reading is a moment's state, not a piece of a whole: only the newest
of each answer is sent, and one missed costs nothing but that moment (the next replaces
it). SQLite's workers hear each other by polling the rows, which the reading never
reaches: there a page follows another worker's answer by the time waited.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from webapp.chat.answering.pieces import PAYLOAD_LIMIT, batch_payloads
from webapp.llm.providers.base import Prefill

__all__ = ["PAYLOAD_LIMIT", "Reading", "parse_readings", "reading_payloads"]

Reading = tuple[int, Prefill]
"""(answer id, the engine's newest reading of its prompt)."""


def reading_payloads(readings: Iterable[Reading], kind: str) -> list[str]:
    """The notices "KIND [[answer, processed, total, cached], ...]" that carry
    `readings`, each under `PAYLOAD_LIMIT` bytes."""
    entries = (
        f"[{answer_id},{read.processed},{read.total},{read.cached}]" for answer_id, read in readings
    )
    return batch_payloads(entries, kind)


def parse_readings(body: str) -> list[Reading]:
    """The readings of a notice's body (what follows its kind); ValueError when it is not
    one: a reading is whole numbers, neither processed nor cached past the total."""
    entries = json.loads(body)
    if not isinstance(entries, list):
        raise ValueError("not a list of readings")
    readings: list[Reading] = []
    for entry in entries:
        if not (
            isinstance(entry, list)
            and len(entry) == 4
            and all(type(n) is int and n >= 0 for n in entry)
        ):
            raise ValueError(f"not a reading: {entry!r}")
        answer_id, processed, total, cached = entry
        if processed > total or cached > total:
            raise ValueError(f"not a reading: {entry!r}")
        readings.append((answer_id, Prefill(processed, total, cached)))
    return readings
