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
from webapp.chat.sending.history import ForSend, read_for_send
from webapp.chat.sending.store import StoredTurn, insert_turn, resume_answer
from webapp.chat.stored.models import Conversation, Message
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.routing import RoutingError
from webapp.owners import owner_columns
from webapp.timeutil import utcnow

CONTINUE_PROMPT = "Continue exactly where your last answer stopped, without repeating it."
"""What Continue asks the model, after the cut answer. It goes with the request only: the
continuation is appended to that answer, and nothing of the asking is stored or shown."""


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
    """The send's one transaction."""
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
    planned = plan_for(manager, read, new.owner, new.conversation_id)
    return insert_turn(connection, conversation, read, planned, new.counts, now)


@dataclass(frozen=True, slots=True)
class Resumed:
    """A continuation as its transaction left it: the answer streaming again, its plan."""

    conversation: Conversation
    answer: Message
    planned: Plan | RoutingError


def resume_turn(
    connection: Connection,
    admission: Admission,
    manager: LLMManager,
    owner: str,
    answer: Message,
    counts: dict[str, int],
    address: str,
) -> Resumed:
    """A continuation's one transaction: admitted like a send, the history read with the
    cut answer last and the request to go on after it, and the same answer made streaming
    again; no row is added."""
    now = utcnow()
    conversation_id = answer.conversation_id
    conversation = admission.admit(connection, owner, conversation_id, now, address)
    read = read_for_send(connection, manager, owner, conversation, CONTINUE_PROMPT, counts)
    planned = plan_for(manager, read, owner, conversation_id)
    return Resumed(conversation, resume_answer(connection, answer, now), planned)


def plan_for(
    manager: LLMManager, read: ForSend, owner: str, conversation_id: str
) -> Plan | RoutingError:
    """The bound for what was read. A configuration that routes nowhere is the answer's
    failure, not the send's: the message is stored all the same."""
    if isinstance(read.route, RoutingError):
        return read.route
    assert read.transcript is not None, "a routed read has its transcript"
    return manager.plan(
        read.route,
        read.transcript,
        caller=owner,
        max_tokens=read.max_tokens,
        temperature=read.temperature,
        cache_scope=conversation_id,
    )
