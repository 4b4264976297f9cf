"""Which thread a send's transaction runs on (SQLite file): a conversation whose last send
was quick sends from the loop itself, and a send whose cut starts afresh (after a
configuration switch or a pin) leaves the loop, however quick the last one was, since it
reads and fits the whole history."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.factories import OWNER, say
from webapp import db as database
from webapp.chat import send
from webapp.chat.jobs import ChatJobs
from webapp.chat.sending import turn

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
"""PostgreSQL has no loop path: every write is a unit of its own."""


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread each send's transaction ended on (a unit rolled back on the loop, to run
    again on the writer thread, is not counted)."""
    # Every unit counts as quick, however loaded the machine: the rows alone decide.
    monkeypatch.setattr(database, "QUICK_UNIT", 60.0)
    ended: list[str] = []
    store = turn.store_turn

    def recorded(*args: Any) -> Any:
        result = store(*args)
        ended.append("loop" if threading.current_thread() is threading.main_thread() else "thread")
        return result

    # The send calls it by the name it imported.
    monkeypatch.setattr(send, "store_turn", recorded)
    return ended


async def test_a_quick_conversation_sends_from_the_loop_until_its_cut_starts_afresh(
    chat: ChatJobs, threads: list[str]
) -> None:
    conversation = await chat.editor.create(OWNER)
    for number in range(3):
        await say(chat, conversation.id, f"short {number}")
    assert threads == ["thread", "loop", "loop"], "the first is not known to be quick"
    await chat.editor.set_configuration(OWNER, conversation.id, "medium")
    await say(chat, conversation.id, "after the switch")
    user, _ = await say(chat, conversation.id, "and again")
    assert threads[3:] == ["thread", "loop"]
    assert user.id is not None
    await chat.editor.pin(OWNER, conversation.id, user.id)
    await say(chat, conversation.id, "after the pin")
    assert threads[5:] == ["thread"]


async def test_sends_at_once_into_quick_conversations_each_take_the_loop(
    chat: ChatJobs, threads: list[str]
) -> None:
    """A burst: each send's transaction runs on the loop as its turn comes (the lock is
    free between them), none waits for the others on the writer thread, and each turn is
    stored once, in its own conversation."""
    conversations = [await chat.editor.create(OWNER) for _ in range(6)]
    for conversation in conversations:
        await say(chat, conversation.id, "known quick from now on")
    del threads[:]
    sent = await asyncio.gather(
        *(say(chat, c.id, f"at once {number}") for number, c in enumerate(conversations))
    )
    assert threads == ["loop"] * len(conversations)
    for number, (conversation, (user, answer)) in enumerate(zip(conversations, sent, strict=True)):
        assert (user.conversation_id, user.content) == (conversation.id, f"at once {number}")
        assert answer.conversation_id == conversation.id and answer.content
