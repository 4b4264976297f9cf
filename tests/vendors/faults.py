"""What a test scripts (error statuses, broken streams) and the refusal of a bad request,
shared by both vendors' endpoints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar


@dataclass
class _Fault:
    status: int
    count: int
    retry_after: int | None = None


@dataclass
class _StreamFault:
    after: int
    """Text pieces streamed before it."""
    count: int
    error: bool
    """True: an `error` event (Anthropic) or error chunk; False: the connection is cut."""


F = TypeVar("F", _Fault, _StreamFault)


def _take(faults: list[F]) -> F | None:
    """The first of `faults`, one of its uses taken (its last takes it off the list). The
    caller holds the lock."""
    if not faults:
        return None
    fault = faults[0]
    fault.count -= 1
    if fault.count <= 0:
        faults.pop(0)
    return fault


class _Invalid(Exception):
    """A request the vendor refuses with 400."""
