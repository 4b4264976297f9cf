"""How every limit on spending is decided: a sliding window over stored rows, counted under
a lock, token buckets for what stores nothing, and places for what a request holds while
it lasts.

Chat sends and gateway calls, imports, embed sends and failed sign-ins each keep a row
per spending in a table of their own. Each limit reads the newest rows in its window and
hands them to one `SlidingWindow`, which says how long the caller must wait. The rows are
counted inside the spending's own transaction, after `advisory_lock`: under PostgreSQL's
READ COMMITTED two transactions would each count without the other and both go past the
limit. This module knows no table, so every package can use it.
"""

from __future__ import annotations

import math
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, func, select

from webapp.errors import TooManyRequests
from webapp.timeutil import as_utc

OWNERS_KEPT = 10_000
"""Owners a per-process memory of limits keeps (embed visitors are many; the oldest go)."""


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """A limit over the spendings of the last `span`: a spending leaves it `span` after it
    was made, so room comes back one spending at a time, never all at once."""

    span: timedelta

    @classmethod
    def of_seconds(cls, seconds: float) -> SlidingWindow:
        return cls(timedelta(seconds=seconds))

    def start(self, now: datetime) -> datetime:
        """Rows made after this are in the window (the query's bound and the wait's)."""
        return now - self.span

    def wait(self, newest_first: Sequence[datetime], allowed: int, now: datetime) -> int | None:
        """None when at most `allowed` of the window's rows (newest first, as many as
        `allowed + 1` suffice) are in it; else the whole seconds, at least one, until the
        row past the `allowed` newest leaves it and they are the only ones left."""
        if len(newest_first) <= allowed:
            return None
        leaving = as_utc(newest_first[allowed])
        return max(1, math.ceil((leaving - self.start(now)).total_seconds()))


def advisory_lock(connection: Connection, key: str) -> None:
    """Make the transactions that name `key` count one at a time, until this one ends (a
    lock of the transaction, PostgreSQL's `pg_advisory_xact_lock` on a hash of `key`). Each
    limiter's keys name what it limits (`rate <owner>`, `embed-send <embed>`, ...), so one
    rarely waits for another's. SQLite needs nothing: its write transactions hold the
    database's write lock from their BEGIN."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))


def try_advisory_lock(connection: Connection, key: str) -> bool:
    """`advisory_lock` without waiting: False when another transaction holds it (always True
    on SQLite), for work that one transaction at a time is enough to do."""
    if connection.dialect.name != "postgresql":
        return True
    taken = connection.execute(select(func.pg_try_advisory_xact_lock(func.hashtext(key))))
    return bool(taken.scalar())


class TokenBuckets:
    """A token bucket per owner, in this process's memory: `rate` tokens a second, at
    most `burst` saved up. For what stores nothing (the preview of a send): a stored
    count would cost a write per keystroke, more than the preview itself, and with
    several workers an owner gets at most a bucket per worker."""

    def __init__(self, rate: float, burst: int, size: int = OWNERS_KEPT) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._size = size
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, owner: str) -> float:
        """Take a token: 0 when one was there, else the seconds until one will be."""
        if self._rate <= 0:
            return 0.0
        now = time.monotonic()
        tokens, then = self._buckets.get(owner, (self._burst, now))
        tokens = min(self._burst, tokens + (now - then) * self._rate)
        taken = tokens >= 1
        self._buckets[owner] = (tokens - 1 if taken else tokens, now)
        self._buckets.move_to_end(owner)
        if len(self._buckets) > self._size:
            self._buckets.popitem(last=False)
        return 0.0 if taken else (1 - tokens) / self._rate


PLACE_RETRY_AFTER = 5
"""What a request refused for want of a place is told to wait (Retry-After, seconds)."""


class Places:
    """How many requests of one kind each key (an owner, an answer) holds open at once in
    this process, under a cap. For requests that hold something for as long as they last
    (an export being written, a long-poll, a page following an answer): a connection, a
    task, what they have read. They store nothing, so each worker counts its own: with N
    workers a key may hold N times the cap."""

    def __init__(self) -> None:
        self._held: Counter[str | int] = Counter()

    def held(self, key: str | int) -> int:
        return self._held[key]

    @contextmanager
    def hold(self, key: str | int, cap: int, refusal: str) -> Iterator[None]:
        """A place for `key` for as long as this lasts, or TooManyRequests (`refusal`)
        when it holds `cap` already (0: no cap)."""
        if 0 < cap <= self._held[key]:
            raise TooManyRequests(refusal, retry_after=PLACE_RETRY_AFTER)
        self._held[key] += 1
        try:
            yield
        finally:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]
