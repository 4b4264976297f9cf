"""When a figure learned for everyone may move: only when distinct callers agree.

What one caller's traffic teaches (the estimate's factor, the template overhead, a
refusal's tightening) becomes that caller's own figure, which sizes that caller's own
sends (`webapp.llm.calibration`). A model's shared figure sizes every caller who has no
figure of its own yet, so no one caller may move it, in either direction: each caller's
own figure is one vote, and the shared figure follows their median only when at least
`QUORUM` distinct voters are on the same side of it, by a bounded step per vote.

This is agreement by design, not a threshold on how odd one prompt looks: a caller who
sends a thousand prompts still has one vote, and a vote is the caller's own figure, which
that caller's own sends pay for first.
"""

from __future__ import annotations

import statistics

from webapp.owners import EMBED_OWNER_PREFIX

QUORUM = 3
"""Distinct voters who must all be on one side of a shared figure before it moves toward
them (and a majority of all voters with them: the median leads)."""
VOTERS = 31
"""Voters kept per model and figure, the most recent: the older ones' votes lapse."""


def voter_of(caller: str) -> str:
    """Who `caller` counts as when callers agree. A user's sessions and tokens are the user
    (`user:<id>`: one account, one vote, however many tokens it makes). Every visitor of an
    embed is that embed (`embed:<name>`): anyone can come back as a new visitor, so
    visitors are not distinct callers. Anything else counts as itself."""
    if caller.startswith(EMBED_OWNER_PREFIX):
        name, _, _visitor = caller[len(EMBED_OWNER_PREFIX) :].rpartition(":")
        return f"{EMBED_OWNER_PREFIX}{name}"
    return caller


class Votes:
    """The latest own figure of each of the most recent distinct voters, for one figure of
    one model."""

    def __init__(self) -> None:
        self._figures: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._figures)

    def cast(self, caller: str, figure: float) -> None:
        """`caller`'s own figure is now `figure`: it replaces the voter's earlier vote."""
        voter = voter_of(caller)
        self._figures.pop(voter, None)
        self._figures[voter] = figure
        if len(self._figures) > VOTERS:
            del self._figures[next(iter(self._figures))]

    def agreed(self, current: float, rise: float, fall: float) -> float:
        """Where the shared figure `current` goes: toward the voters' median when that is
        on one side of it and at least `QUORUM` voters are on that side too, by at most
        `rise` up or `fall` down; else it stays."""
        figures = list(self._figures.values())
        if len(figures) < QUORUM:
            return current
        median = statistics.median(figures)
        if median > current and sum(figure > current for figure in figures) >= QUORUM:
            return min(median, current + rise)
        if median < current and sum(figure < current for figure in figures) >= QUORUM:
            return max(median, current - fall)
        return current
