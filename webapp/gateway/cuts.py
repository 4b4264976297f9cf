"""Where the cut of a stateless chat call stays, between one call and the next.

A client calling `/v1/chat/completions` without a conversation sends its whole history
every time; the gateway stores none of it. For the engine's prompt cache the cut must
still stay where the previous call put it (see `webapp.llm.window`), so the gateway
remembers, per caller and head (the configuration, the system prompt and the opening
exchange), what the last call sent: a digest of its messages and the index its cut kept
from. A call whose messages begin with exactly those keeps that cut; any other, or one
served by another model, starts afresh. Memory is bounded: the entries least recently
used are forgotten first, which only costs the next call of theirs a fresh cut.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from webapp.llm.providers.base import Message
from webapp.llm.window import FitResult, kept_from, split_turns

CUTS_KEPT = 4096
"""Callers and heads whose last cut is remembered, in one process."""


def _digest(messages: Sequence[Message]) -> bytes:
    """The messages' digest, keys sorted. msgspec encodes a long transcript in a tenth of
    the time json.dumps takes (2,048 messages of 2 KB: 7 ms, not 53), which the event loop
    would otherwise spend on every call; text it cannot write (a lone surrogate) is
    encoded the slow way, so the same messages always have the same digest."""
    try:
        encoded = msgspec.json.encode(list(messages), order="sorted")
    except (UnicodeEncodeError, msgspec.EncodeError, TypeError):
        text = json.dumps(list(messages), sort_keys=True, ensure_ascii=False)
        encoded = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(encoded, digest_size=16).digest()


def _head(messages: Sequence[Message]) -> Sequence[Message]:
    preamble, turns = split_turns(messages)
    end = turns[0][-1] + 1 if len(turns) > 1 else len(preamble)
    return messages[:end]


@dataclass(frozen=True, slots=True)
class _LastCall:
    length: int
    digest: bytes
    model: str
    kept_from: int


class StatelessCuts:
    def __init__(self, size: int = CUTS_KEPT) -> None:
        self._size = size
        self._calls: OrderedDict[tuple[str, str, bytes], _LastCall] = OrderedDict()

    @staticmethod
    def _key(owner: str, configuration: str, messages: Sequence[Message]) -> tuple[str, str, bytes]:
        return owner, configuration, _digest(_head(messages))

    def keep_from(
        self, owner: str, configuration: str, model: str, messages: Sequence[Message]
    ) -> int:
        """The index the call's cut keeps from (0: afresh), for `messages` to be sent by
        `model`."""
        last = self._calls.get(self._key(owner, configuration, messages))
        if (
            last is None
            or last.model != model
            or len(messages) <= last.length
            or _digest(messages[: last.length]) != last.digest
        ):
            return 0
        return last.kept_from

    def remember(
        self, owner: str, configuration: str, messages: Sequence[Message], fit: FitResult
    ) -> None:
        """What a call sent, for the caller's next call to keep its cut."""
        key = self._key(owner, configuration, messages)
        last = _LastCall(len(messages), _digest(messages), fit.model, kept_from(fit.left_out))
        self._calls[key] = last
        self._calls.move_to_end(key)
        while len(self._calls) > self._size:
            self._calls.popitem(last=False)
