"""The send's second stage: everything its plan needs, read once under the lock.

`read_for_send` finds the route of the conversation's configuration, where the new turn
goes (the active branch's leaf, or for an
alternative to a user turn, the row that turn continued), reads the branch's tail, the
previous send's cut, the owner's instructions and the conversation's preset (its system
prompt joins the head before them, its answer room and temperature go with the plan), and
loads as much history as the
route's largest budget could hold. What it returns is all `LLMManager.plan` and the
store stage need; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from webapp.accounts.preferences import owner_instructions, with_instructions
from webapp.chat.files.models import StoredFile
from webapp.chat.sending.file_counts import exact_ids
from webapp.chat.sending.files import (
    attachment_dicts,
    check_sizes,
    newest_message,
    seeing_route,
    with_history_pictures,
)
from webapp.chat.stored.branches import parent_of
from webapp.chat.stored.history import (
    PreviousFit,
    Tail,
    load_transcript,
    previous_fit,
    read_tail,
)
from webapp.chat.stored.models import Conversation, Role
from webapp.chat.stored.presets import conversation_preset
from webapp.chat.stored.rows import row_in
from webapp.chat.stored.summaries import of_version, on_branch
from webapp.db import off_the_loop
from webapp.errors import InvalidInput
from webapp.llm.estimator import estimate_message
from webapp.llm.head_room import crowded_out
from webapp.llm.manager import LLMManager
from webapp.llm.routing import Route, RoutingError
from webapp.llm.summaries import room_for, summary_tokens
from webapp.llm.window import SummarySlot, Transcript, budget_for


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
    """What the head carries beside the configuration's system prompt: the preset's
    system prompt, then the owner's custom instructions."""
    max_tokens: int | None = None
    """The answer's room and its temperature, if the conversation's preset sets them."""
    temperature: float | None = None
    files: Sequence[StoredFile] = ()
    """The files the new message carries (`sending.files`)."""
    attachments: list[dict[str, Any]] | None = None
    """Those files as the user row keeps them."""


def read_for_send(
    connection: Connection,
    manager: LLMManager,
    owner: str,
    conversation: Conversation,
    text: str,
    counts: dict[str, int] | None = None,
    alternative_to: int | None = None,
    afresh: bool = False,
    files: Sequence[StoredFile] = (),
) -> ForSend:
    """Read for sending `text` in `conversation` (`counts`: its exact counts, by tokenizer),
    as an alternative to the user turn `alternative_to` if given. A configuration that
    routes nowhere is read for its tail only. The cut of the branch's previous send is
    kept unless it is to start afresh (`afresh`: an edit; or a pin, configuration or
    branch switch since that send), when the whole history is read and fitted. With
    `files`, a route that cannot read them is refused, and one too large for the model
    alone too (`sending.files`)."""
    catalog = manager.catalog
    try:
        route: Route | RoutingError = manager.route(conversation.configuration)
    except RoutingError as error:
        route = error
    exact = exact_ids(manager, route.models) if isinstance(route, Route) else {}
    if files and isinstance(route, Route):
        route = seeing_route(catalog, route, files)
        check_sizes(catalog, route, manager.largest_budget(route), files, exact)
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
    newest, tokens = newest_message(catalog, route, text, files)
    attachments = attachment_dicts(catalog, route, files, exact)
    if isinstance(route, RoutingError):
        return ForSend(route, tail, text, tokens, files=files, attachments=attachments)
    preset = conversation_preset(connection, conversation)
    max_tokens = preset.max_tokens if preset else None
    instructions = (
        with_instructions(
            preset.system_prompt if preset else None, owner_instructions(connection, owner)
        )
        or ""
    )
    crowded = crowded_out(
        manager.catalog, route, instructions, manager.serving, max_tokens=max_tokens
    )
    if crowded is not None:  # every send would overflow, and the engine refuse it
        raise InvalidInput(crowded)
    previous = None if afresh else previous_fit(connection, conversation.id, tail)
    same_model = previous is not None and previous.model == route.primary.name
    cut = previous.kept_from if previous and same_model else 0
    cleared_seq = previous.cleared_seq if previous and same_model else 0
    system = with_instructions(route.configuration.system_prompt, instructions)
    system_message = {"role": "system", "content": system} if system else None
    slot, slot_text = summary_slot(
        connection, manager, conversation, route, tail, previous, max_tokens
    )
    transcript = load_transcript(
        connection,
        conversation.id,
        tail,
        newest,
        tokens,
        budget=manager.largest_budget(route, max_tokens),
        system_prompt=system_message,
        system_tokens=estimate_message(system_message) if system_message else 0,
        system_counts=manager.system_counts(route, system) if system else None,
        sizers=manager.sizers(route, owner),
        newest_counts=counts,
        cut=cut,
        clear_keep=route.configuration.keep_tool_results,
        cleared_seq=cleared_seq,
        summary=slot,
        summary_text=slot_text,
    )
    transcript = with_history_pictures(connection, conversation.id, transcript, files)
    return ForSend(
        route,
        tail,
        text,
        tokens,
        transcript,
        instructions,
        max_tokens,
        preset.temperature if preset else None,
        files,
        attachments,
    )


def summarizes(conversation: Conversation, route: Route) -> bool:
    """Whether the conversation's sends carry a summary: its own choice, else its
    configuration's."""
    if conversation.summarize is not None:
        return conversation.summarize
    return route.configuration.summarize


def summary_slot(
    connection: Connection,
    manager: LLMManager,
    conversation: Conversation,
    route: Route,
    tail: Tail,
    previous: PreviousFit | None,
    max_tokens: int | None,
) -> tuple[SummarySlot | None, str]:
    """The summary slot a send carries, and its text. Between moves it is the version the
    previous send of the branch carried (so the request stays a pure append); a send that
    starts afresh takes the newest that applies to the branch; none at all yields an empty
    slot, which keeps its room for the first one. (None: summaries are off.)"""
    if not summarizes(conversation, route):
        return None, ""
    model = route.primary
    budget = budget_for(manager.serving(model), manager.reserve_for(route, model, max_tokens))
    room = room_for(summary_tokens(route.configuration.summary_max_tokens, budget))
    summaries = on_branch(connection, conversation.id, tail.branch)
    if previous is None:
        chosen = summaries[-1] if summaries else None
    else:
        chosen = of_version(summaries, previous.summary)
    if chosen is None:
        return SummarySlot(0, room), ""
    covers = (chosen.first_seq, chosen.last_seq)
    return SummarySlot(0, room, chosen.version, chosen.id, covers), chosen.content
