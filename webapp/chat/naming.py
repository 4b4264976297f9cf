"""Titles the conversation's model writes after its first answer.

A send names a new conversation at once with a clean cut of its first message
(`titles.title_from`); once the first answer is complete, one short call asks the
configuration's model for a better name, in a task of its own: it never delays the answer,
its failure (or a reply that cleans up to nothing) keeps the cut, and it replaces the
title only while the title is still that cut, so a rename, before or during the call, is
never overwritten. The page asks for the title again when the first answer is done
(`GET /c/{id}/title`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict

from sqlalchemy import update
from sqlmodel import Session, col

from webapp.chat.answering.answer import RunningAnswer
from webapp.chat.reading import ConversationReader
from webapp.chat.sending.files import first_title
from webapp.chat.stored.models import Conversation, Message, Status
from webapp.chat.stored.titles import FIRST_MESSAGE_TITLE, cut_at_word
from webapp.db import Database
from webapp.llm.manager import LLMManager
from webapp.llm.routing import RoutingError
from webapp.owners import USER_OWNER_PREFIX

log = logging.getLogger(__name__)

TITLE_TOKENS = 24
"""The answer's room: a title of a few words, never an essay."""
TITLE_TIMEOUT = 30.0
"""A title call slower than this is given up on (the cut stays)."""
EXCERPT_CHARS = 1200
"""How much of the first message and of the answer the model reads, at most (less for a
small window: the call must fit whatever the conversation's model is)."""
FINISHED_KEPT = 1000
TITLE_WAIT = 45.0
"""How long the page's request for the model's title is held, at most: a first answer and
the title call after it, on a slow model; past this the title shows on the next load."""
TITLE_POLL = 1.0
"""How often that request looks again when another worker makes the title call."""
ASK = (
    "Write a title for the conversation below, as its owner would name it in a list: "
    "at most six words, in the conversation's language, with no quotes and nothing else."
)
_LABEL = re.compile(r"^\s*(title|titre|titel)\s*:\s*", re.IGNORECASE)
_WRAPPERS = "\"'`*#_“”‘’«» "


def clean_model_title(reply: str) -> str:
    """The title in a model's reply: its first line, without a "Title:" label, quotes or
    markdown marks, at a word boundary within the first-message limit ("" if none)."""
    line = next((line for line in reply.splitlines() if line.strip()), "")
    line = _LABEL.sub("", line.replace("\x00", "")).strip(_WRAPPERS)
    line = line.rstrip(".").strip(_WRAPPERS)
    return cut_at_word(line, FIRST_MESSAGE_TITLE) if line else ""


class Titler:
    """Starts the title call of a conversation's first turn, and ends those still running
    when the server stops."""

    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        reader: ConversationReader,
        *,
        enabled: bool = True,
    ) -> None:
        self._db = db
        self._manager = manager
        self._reader = reader
        self._enabled = enabled
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        """Conversations whose title call this process ended lately: the page may ask
        only after it ended, and must not wait then."""

    def follow(
        self, owner: str, conversation: Conversation, user: Message, running: RunningAnswer
    ) -> None:
        """After the first turn of a user's conversation (embed visitors see no titles, so
        their quota pays for none), once its answer is done: name the conversation."""
        if not self._enabled or user.seq != 1 or not owner.startswith(USER_OWNER_PREFIX):
            return
        conversation_id = conversation.id
        named = self._name(conversation, user, running)
        task = asyncio.create_task(named, name=f"title-{conversation_id}")
        self._pending[conversation_id] = task
        task.add_done_callback(lambda _: self._ended(conversation_id))

    def _ended(self, conversation_id: str) -> None:
        self._pending.pop(conversation_id, None)
        self._finished[conversation_id] = None
        if len(self._finished) > FINISHED_KEPT:
            self._finished.popitem(last=False)

    async def wait(self, conversation_id: str, limit: float) -> bool:
        """Wait up to `limit` seconds for this process's title call of the conversation;
        True when there is one and it is over (its title, if any, is stored), or when no
        title calls are made at all. Without one here (another worker makes it, or none
        is made) this only waits."""
        if not self._enabled or conversation_id in self._finished:
            return True
        task = self._pending.get(conversation_id)
        if task is None:
            await asyncio.sleep(limit)
            return False
        await asyncio.wait({task}, timeout=limit)
        return task.done()

    async def title_after(
        self, owner: str, conversation_id: str, was: str, timeout: float = TITLE_WAIT
    ) -> Conversation:
        """The conversation once its title is no longer `was` (the model named it, or its
        owner did), or as it is when the model's call ends without a title or `timeout`
        passes: what the page asks for after its first answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            conversation = await self._reader.get(owner, conversation_id)
            left = deadline - loop.time()
            if conversation.title != was or left <= 0:
                return conversation
            if await self.wait(conversation_id, min(left, TITLE_POLL)):
                return await self._reader.get(owner, conversation_id)

    async def _name(
        self, conversation: Conversation, user: Message, running: RunningAnswer
    ) -> None:
        await asyncio.gather(running.task, return_exceptions=True)
        try:
            answer = await self._db.read(lambda session: session.get(Message, running.answer_id))
            if answer is None or answer.status != Status.COMPLETE or not answer.content:
                return
            title = await asyncio.wait_for(
                self._ask(conversation.configuration, user.content, answer.content),
                TITLE_TIMEOUT,
            )
            if title:
                await self._db.write(_retitle, conversation.id, first_title(user.content), title)
        except Exception as error:  # any failure of the call: the clean cut stays the title
            log.info("no title from the model for %s: %s", conversation.id, error)

    async def _ask(self, configuration: str, question: str, answer: str) -> str:
        manager = self._manager
        try:
            route = manager.route(configuration)
        except RoutingError:
            return ""
        model = route.primary
        if manager.catalog.providers[model.provider].kind == "demo":
            return ""  # the offline demo reports what it was sent: no title in that
        room = min(EXCERPT_CHARS, max(200, model.window))
        conversation = f"User: {question[:room]}\n\nAssistant: {answer[:room]}"
        result = await manager.provider_for(model).chat(
            model.model_id,
            [{"role": "system", "content": ASK}, {"role": "user", "content": conversation}],
            max_tokens=TITLE_TOKENS,
        )
        return clean_model_title(result.content)

    async def shutdown(self) -> None:
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _retitle(session: Session, conversation_id: str, cut: str, title: str) -> None:
    """Only while the title is still the first message's cut: a rename always wins."""
    session.connection().execute(
        update(Conversation)
        .where(col(Conversation.id) == conversation_id, col(Conversation.title) == cut)
        .values(title=title)
    )
