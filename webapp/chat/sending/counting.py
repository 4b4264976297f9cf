"""Before the send's transaction: the new message counted by the model that will read it.

Counting may be a request to the engine, which must not hold the conversation's lock, so
it happens before `Admission.admit`. Which model will answer first comes from what this
process last saw of the conversation (`RecentConfigurations`); when that is not known,
or the tokenizer fails, the answer task counts the message instead
(`LLMManager.count_missing`), so a wrong guess costs a count, never a wrong fit.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from webapp.chat.answering.answer import COUNT_TIMEOUT
from webapp.llm.manager import LLMManager
from webapp.llm.routing import RoutingError

log = logging.getLogger(__name__)


class RecentConfigurations:
    """Which configuration this process last saw each conversation use: only a hint (for
    counting a new message before its send), so a stale entry costs a re-count, never a
    wrong fit."""

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._known: OrderedDict[str, str] = OrderedDict()

    def get(self, conversation_id: str) -> str | None:
        return self._known.get(conversation_id)

    def remember(self, conversation_id: str, configuration: str) -> None:
        self._known[conversation_id] = configuration
        self._known.move_to_end(conversation_id)
        if len(self._known) > self._size:
            self._known.popitem(last=False)


async def count_newest(
    manager: LLMManager, recent: RecentConfigurations, conversation_id: str, text: str
) -> dict[str, int]:
    """`text`'s exact count by the tokenizer of the conversation's first model, keyed by
    the tokenizer's id; empty when there is none to be had now."""
    configuration = recent.get(conversation_id)
    if configuration is None:
        return {}
    try:
        route = manager.route(configuration)
    except RoutingError:
        return {}
    tokenizer = manager.tokenizer_for(route.primary)
    if not tokenizer.exact:
        return {}
    try:
        (count,) = await asyncio.wait_for(tokenizer.count([text]), COUNT_TIMEOUT)
    except Exception as error:  # any failure of a tokenizer: the send estimates instead
        log.warning("could not count a new message with %s: %s", tokenizer.id, error)
        return {}
    return {tokenizer.id: count}
