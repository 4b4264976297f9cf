"""The send's one transaction, its stages in order: `Admission.admit` (the lock, the rate
limit, one answer at a time), `read_for_send` (the tail, the cut, as much history as the
budget could hold, the files' route), `LLMManager.plan` (the bound, for the model that
answers first) and `insert_turn` (the user's row with its fit and its files, and the
answer's placeholder)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, insert

from webapp.chat.files.models import StoredFile
from webapp.chat.sending.admission import Admission
from webapp.chat.sending.history import read_for_send
from webapp.chat.sending.store import StoredTurn, insert_turn
from webapp.chat.stored.models import Conversation
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.routing import RoutingError
from webapp.owners import owner_columns
from webapp.timeutil import utcnow


@dataclass(frozen=True, slots=True)
class NewTurn:
    """A message to send, as the send's stages before the transaction left it."""

    owner: str
    conversation_id: str
    text: str
    counts: dict[str, int]
    """The message's exact counts, by tokenizer (`sending.counting`)."""
    alternative_to: int | None = None
    edit: bool = False
    files: list[StoredFile] = field(default_factory=list)
    address: str = ""
    """The client's address, for the caller quotas."""
    draft: Conversation | None = None
    """A conversation to store first (an embed visitor's first send), so a refused send
    stores nothing."""


def drafted(owner: str, draft: Conversation) -> Conversation:
    """The conversation an embed visitor's first send stores: `draft`'s configuration and
    title, owned by `owner`, with an id of its own."""
    return Conversation(
        owner=owner,
        **owner_columns(owner),
        configuration=draft.configuration,
        title=draft.title,
    )


def store_turn(
    connection: Connection, admission: Admission, manager: LLMManager, new: NewTurn
) -> StoredTurn:
    """The send's one transaction. A configuration that routes nowhere is the answer's
    failure, not the send's: the message is stored all the same."""
    now = utcnow()
    if new.draft is not None:
        connection.execute(insert(Conversation).values(new.draft.model_dump()))
    conversation = admission.admit(connection, new.owner, new.conversation_id, now, new.address)
    read = read_for_send(
        connection,
        manager,
        new.owner,
        conversation,
        new.text,
        new.counts,
        new.alternative_to,
        new.edit,
        new.files,
    )
    if isinstance(read.route, RoutingError):
        planned: Plan | RoutingError = read.route
    else:
        assert read.transcript is not None, "a routed read has its transcript"
        planned = manager.plan(
            read.route, read.transcript, caller=new.owner, cache_scope=new.conversation_id
        )
    return insert_turn(connection, conversation, read, planned, new.counts, now)
