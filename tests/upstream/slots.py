"""A llama.cpp server's slots as its prompt cache: each slot keeps only the prompt it last
evaluated, and a request takes one slot.

Which slot, as llama.cpp's server chooses it (its `get_available_slot`): a request that
names one (`id_slot`) takes that one (counted round the slots, as the server wraps an id
past its last); any other takes, among the idle slots that hold a prompt, the one whose
prompt shares the longest prefix with the request's, measured as a share of the
request's length, if that share is above `--slot-prompt-similarity` (0.1 by default; 0
turns the search off); failing that, the least recently used idle slot (the last of
equals, as the server's `<=` picks). Requests here come one at a time, so every slot is
idle when one is chosen. The server's host-memory prompt cache (`--cache-ram`), which can
restore an evicted prompt into the slot chosen, is not modelled: this is a server
started with `--cache-ram 0`, or one older than it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.upstream.cache import _shared_prefix

SLOT_PROMPT_SIMILARITY = 0.1
"""llama.cpp's default `--slot-prompt-similarity`."""


@dataclass
class Slots:
    """One model's slots: the prompt each holds and when it was last used."""

    count: int
    similarity: float = SLOT_PROMPT_SIMILARITY
    prompts: list[list[int]] = field(default_factory=list)
    last_used: list[int] = field(default_factory=list)
    clock: int = 0
    chosen: list[int] = field(default_factory=list)
    """Every request's slot, in order (what a test or a benchmark reads back)."""

    def __post_init__(self) -> None:
        self.prompts = [[] for _ in range(self.count)]
        self.last_used = [-1] * self.count

    def choose(self, tokens: list[int], named: int | None) -> int:
        """The slot a request for `tokens` takes (`named`: its `id_slot`)."""
        if named is not None:
            return named % self.count
        best, best_share = None, 0.0
        if self.similarity > 0 and tokens:
            for slot, held in enumerate(self.prompts):
                if not held:
                    continue
                share = _shared_prefix(held, tokens) / len(tokens)
                if share > best_share and share > self.similarity:
                    best, best_share = slot, share
        if best is not None:
            return best
        oldest = 0
        for slot in range(self.count):
            if self.last_used[slot] <= self.last_used[oldest]:
                oldest = slot
        return oldest

    def take(self, tokens: list[int], named: int | None) -> int:
        """Run a request in its slot: what the slot held shares this many tokens with it
        (the rest is evaluated), and the slot holds the request's prompt from now on."""
        slot = self.choose(tokens, named)
        shared = _shared_prefix(self.prompts[slot], tokens)
        self.clock += 1
        self.prompts[slot] = tokens
        self.last_used[slot] = self.clock
        self.chosen.append(slot)
        return shared
