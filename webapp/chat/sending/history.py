"""The send's second stage: everything its plan needs, read once under the lock.

`read_for_send` finds the route of the conversation's configuration, where the new turn
goes (the active branch's leaf, or for an
alternative to a user turn, the row that turn continued), reads the branch's tail, the
previous send's cut and the owner's instructions, and loads as much history as the
route's largest budget could hold. What it returns is all `LLMManager.plan` and the
store stage need; nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from webapp.accounts.preferences import owner_instructions, with_instructions
from webapp.chat.stored.branches import parent_of
from webapp.chat.stored.history import Tail, load_transcript, previous_fit, read_tail
from webapp.chat.stored.models import Conversation, Role
from webapp.chat.stored.rows import row_in
from webapp.db import off_the_loop
from webapp.errors import InvalidInput
from webapp.llm.estimator import estimate_message
from webapp.llm.head_room import crowded_out
from webapp.llm.manager import LLMManager
from webapp.llm.routing import Route, RoutingError
from webapp.llm.window import Transcript


@dataclass(frozen=True, slots=True)
class ForSend:
    """What a send read: the route (or why there is none), the tail the new turn follows,
    and with a route, the transcript to fit (the new message last) and the owner's
    instructions the head carries."""

    route: Route | RoutingError
    tail: Tail
    text: str
    tokens: int
    """The new message's estimate."""
    transcript: Transcript | None = None
    instructions: str = ""


def read_for_send(
    connection: Connection,
    manager: LLMManager,
    owner: str,
    conversation: Conversation,
    text: str,
    counts: dict[str, int] | None = None,
    alternative_to: int | None = None,
    afresh: bool = False,
) -> ForSend:
    """Read for sending `text` in `conversation` (`counts`: its exact counts, by tokenizer),
    as an alternative to the user turn `alternative_to` if given. A configuration that
    routes nowhere is read for its tail only. The cut of the branch's previous send is
    kept unless it is to start afresh (`afresh`: an edit; or a pin, configuration or
    branch switch since that send), when the whole history is read and fitted."""
    try:
        route: Route | RoutingError = manager.route(conversation.configuration)
    except RoutingError as error:
        route = error
    afresh = afresh or conversation.cut_reset
    if afresh:
        off_the_loop()  # the whole history is read and fitted: not a unit for the loop
    leaf = conversation.active_seq
    if alternative_to is not None:
        original = row_in(connection, conversation.id, alternative_to)
        if original.role != Role.USER:
            raise InvalidInput("edit_of names a user's message: an answer is regenerated")
        leaf = parent_of(original)
    tokenizers = manager.exact_tokenizers(route) if isinstance(route, Route) else []
    tail = read_tail(connection, conversation.id, tokenizers, leaf)
    newest = {"role": Role.USER.value, "content": text}
    tokens = estimate_message(newest)
    if isinstance(route, RoutingError):
        return ForSend(route, tail, text, tokens)
    instructions = owner_instructions(connection, owner)
    crowded = crowded_out(manager.catalog, route, instructions, manager.serving)
    if crowded is not None:  # every send would overflow, and the engine refuse it
        raise InvalidInput(crowded)
    previous = None if afresh else previous_fit(connection, conversation.id, tail)
    cut = previous.kept_from if previous and previous.model == route.primary.name else 0
    system = with_instructions(route.configuration.system_prompt, instructions)
    system_message = {"role": "system", "content": system} if system else None
    transcript = load_transcript(
        connection,
        conversation.id,
        tail,
        newest,
        tokens,
        budget=manager.largest_budget(route),
        system_prompt=system_message,
        system_tokens=estimate_message(system_message) if system_message else 0,
        system_counts=manager.system_counts(route, system) if system else None,
        sizers=manager.sizers(route, owner),
        newest_counts=counts,
        cut=cut,
    )
    return ForSend(route, tail, text, tokens, transcript, instructions)
