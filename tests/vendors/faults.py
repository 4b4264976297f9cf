"""What a test scripts (error statuses, broken streams) and the refusal of a bad request,
shared by both vendors' endpoints."""

from __future__ import annotations

from dataclasses import dataclass


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


class _Invalid(Exception):
    """A request the vendor refuses with 400."""
