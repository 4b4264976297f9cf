"""How a gateway call's body comes in, so that no call stalls the server for others.

In this order, each step bounded before the next costs anything:

1. the rate limit (`RateLimit.admit`): a caller over its limit is refused before one
   byte of its body is read;
2. the body is read up to `WEBAPP_GATEWAY_MAX_BODY_BYTES` (the /v1 router's
   `request_max_body_size`): a larger one is a 413 as soon as its Content-Length says
   so, or as soon as that many bytes have come;
3. the JSON is checked and its messages counted without being built
   (`webapp.gateway.schemas.parse`): more than `WEBAPP_GATEWAY_MAX_MESSAGES` is a 400
   before any message is parsed; then content parts, tool calls and inputs are counted
   before the request model validates them.

Parsing cannot be moved off the event loop (the JSON decoder holds the GIL for the
whole document, so a thread would stall the loop just the same): the bounds are what
keep it short. What can be moved is the size estimate of a long transcript
(`estimates`), which works in C passes between which the loop gets its turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from litestar import Request
from pydantic import BaseModel

from webapp.gateway.limits import RateLimit
from webapp.gateway.schemas import parse
from webapp.llm.estimator import OFF_LOOP_CHARS, estimate_message
from webapp.llm.providers.base import Message

Body = TypeVar("Body", bound=BaseModel)

OFF_LOOP_BYTES = OFF_LOOP_CHARS
"""A body larger than this has its messages estimated in a thread, as long text is."""


@dataclass(frozen=True, slots=True)
class Intake:
    limit: RateLimit
    max_messages: int

    async def read(
        self,
        request: Request[Any, Any, Any],
        owner: str,
        model: type[Body],
        *,
        record: bool = True,
    ) -> tuple[Body, int]:
        """The call admitted (counted unless `record` is False: a call into a
        conversation is counted by its stored message), then its body, bounded, as
        `model`; and the body's size in bytes."""
        await self.limit.admit(owner, record=record)
        raw = await request.body()
        body: Body = parse(model, raw, self.max_messages)
        return body, len(raw)


async def estimates(messages: Sequence[Message], size: int) -> list[int] | None:
    """The messages' estimates, worked out in a thread when the body was large, so a
    long transcript does not hold the loop while it is sized; None (the fit estimates
    them itself) when it was small."""
    if size <= OFF_LOOP_BYTES:
        return None
    return await asyncio.to_thread(lambda: [estimate_message(m) for m in messages])
