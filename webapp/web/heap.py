"""The cycle collector set for a process that loads a great deal once and then serves.

By the end of start-up a serving process holds some 150,000 objects the collector tracks
(tokenizer vocabularies, SQLAlchemy's and pydantic's machinery, the templates) that live as
long as the process does, and under load the full collections walked 360,000-400,000: about
100 ms each on the benchmark machine, a few times a minute, and each such pause landed on
the sends in flight (bench-load, N = 200: it was what the TTFT p99 was made of). So, once
start-up is done:

- what is alive then is collected once and frozen (`gc.freeze`): the collector no longer
  walks it, and since it is never freed before the process exits, nothing is lost;
- the youngest generation is collected after `YOUNG` net allocations instead of Python's
  700. A send allocates thousands of short-lived containers that reference counting frees
  at once; at 700 the collector ran every few sends to find almost nothing, and every tenth
  of its runs promoted survivors toward the full collections above. Garbage in cycles is
  still found, a little later; memory stays as it was (docs/benchmarks.md, bench-load).

Only `webapp serve`'s processes do this (`webapp.asgi`): tests and tools building an app in
their own process keep Python's defaults.
"""

from __future__ import annotations

import gc

YOUNG = 10_000
"""Net allocations between collections of the youngest generation."""


def settle() -> None:
    """Freeze what start-up left alive and space the young collections out."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
