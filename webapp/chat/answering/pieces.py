"""An answer's new text carried in notices, and put back together by whoever hears it.

A watcher on another worker used to see text only once the writer had flushed it to the
row (every `stream_flush_interval`): a page there lagged the writer's own pages by a
flush. Now the writer also announces each answer's new text, every `TEXT_PACE`, as
pieces that name where they start, and a watcher appends what it hears. A NOTIFY payload
is limited (`PAYLOAD_LIMIT`), so a long append is cut into several pieces, and the
pieces of many answers share payloads. A notice can be missed (the listener reconnects)
or come before the watcher's own read of the row: the offsets make a piece heard twice
harmless and a missing one visible, and the row, read on the next flush's notice, fills
the hole (`FollowedText`): a watcher never shows text twice, nor skips any.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

TEXT_PACE = 0.02
"""Seconds between a writer's text notices: faster than a page shows text (it shows at
most one snapshot in `live`'s 50 ms), a transaction each while its answers move."""
PAYLOAD_LIMIT = 7900
"""Bytes in one notice: PostgreSQL refuses 8,000 or more (its default build)."""

Piece = tuple[int, int, str]
"""(answer id, where the piece starts in the answer's text, the piece)."""


def payloads(pieces: Iterable[Piece], kind: str) -> list[str]:
    """The notices "KIND [[answer, start, piece], ...]" that carry `pieces`, each under
    `PAYLOAD_LIMIT` bytes (ASCII JSON: a byte a character)."""
    return batch_payloads(_entries(pieces, entry_budget(kind)), kind)


def entry_budget(kind: str) -> int:
    """Bytes left for the entries of one "KIND [...]" notice."""
    return PAYLOAD_LIMIT - len(kind) - len(" []")


def batch_payloads(entries: Iterable[str], kind: str) -> list[str]:
    """The notices "KIND [entry, ...]" that carry the JSON `entries` (each within
    `entry_budget(kind)`), as few as fit under `PAYLOAD_LIMIT` bytes each, in order. Text
    pieces and prefill readings share this packing so that both keep to the one limit."""
    budget = entry_budget(kind)
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for entry in entries:
        if batch and size + 1 + len(entry) > budget:
            out.append(f"{kind} [{','.join(batch)}]")
            batch, size = [], 0
        size += len(entry) + (1 if batch else 0)
        batch.append(entry)
    if batch:
        out.append(f"{kind} [{','.join(batch)}]")
    return out


def _entries(pieces: Iterable[Piece], budget: int) -> Iterator[str]:
    """Each piece as one JSON entry, cut where its encoding would pass `budget`."""
    for answer_id, start, piece in pieces:
        while piece:
            take = len(piece)
            while True:
                entry = json.dumps([answer_id, start, piece[:take]], separators=(",", ":"))
                if len(entry) <= budget:
                    break
                # Escapes make some characters cost up to 12 bytes: shrink in proportion.
                take = max(1, min(take - 1, take * budget // len(entry)))
            yield entry
            start += take
            piece = piece[take:]


def parse(body: str) -> list[Piece]:
    """The pieces of a notice's body (what follows its kind); ValueError if malformed."""
    entries = json.loads(body)
    if not isinstance(entries, list):
        raise ValueError("a text notice carries a list")
    pieces: list[Piece] = []
    for entry in entries:
        match entry:
            case [int(answer_id), int(start), str(piece)] if start >= 0:
                pieces.append((answer_id, start, piece))
            case _:
                raise ValueError(f"not a piece: {entry!r}")
    return pieces


class FollowedText:
    """An answer's text as one watcher knows it: it only grows, by pieces that fit on its
    end; a piece that starts past the end waits for the text between (the row, read on
    the next flush's notice: `add(0, row_text)`)."""

    __slots__ = ("_ahead", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._ahead: list[tuple[int, str]] = []

    def add(self, start: int, piece: str) -> None:
        self._ahead.append((start, piece))
        while self._ahead:
            fitting = [p for p in self._ahead if p[0] <= len(self.text)]
            if not fitting:
                return
            for start, piece in fitting:
                self._ahead.remove((start, piece))
                # What the watcher already has is skipped: a piece heard twice, or text
                # the row already showed.
                self.text += piece[len(self.text) - start :]

    @property
    def waiting(self) -> bool:
        """Whether pieces wait for text not heard yet (a notice was missed)."""
        return bool(self._ahead)
