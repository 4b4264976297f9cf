"""The fit the next send would make, stored nowhere: what the context meter shows while
the user types.

It reads like a send (`read_for_send`) and plans like one, but without the conversation's
lock, so it may be a send behind; the send itself fits again. The text being typed is
estimated, not sent to the engine's tokenizer on every pause: the history's counts are
stored already, and the send counts it exactly.
"""

from __future__ import annotations

import math

from sqlmodel import Session

from webapp.chat.files.models import StoredFile
from webapp.chat.sending.admission import checked_text
from webapp.chat.sending.counting import RecentConfigurations
from webapp.chat.sending.files import read_files, with_left_out_files, with_text_files
from webapp.chat.sending.history import read_for_send
from webapp.chat.stored.models import MESSAGE_DEFAULTS, Message, Role
from webapp.chat.stored.rows import fit_columns, owned_in
from webapp.db import Database, as_loaded
from webapp.errors import InvalidInput, TooManyRequests
from webapp.limits import TokenBuckets
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.routing import RoutingError
from webapp.llm.window import FitResult
from webapp.settings import Settings
from webapp.timeutil import utcnow


class Previewer:
    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        settings: Settings,
        recent: RecentConfigurations,
    ) -> None:
        self._db = db
        self._manager = manager
        self._settings = settings
        self._recent = recent
        self._previews = TokenBuckets(settings.preview_rate, settings.preview_burst)

    async def preview(self, owner: str, conversation_id: str, content: object) -> Message:
        """The user row the next send of `content` would write, with its fit."""
        row, _ = await self.preview_fit(owner, conversation_id, content)
        return row

    async def preview_fit(
        self, owner: str, conversation_id: str, content: object, files: object = ()
    ) -> tuple[Message, FitResult]:
        """`preview`'s row, and the fit it was made from (what the row does not keep, such
        as how many more turns fit before the cut must move). Throttled per owner
        (`TokenBuckets`): it stores nothing, but each one reads and fits a history. With
        `files` (ids), counted with the message as a send would count them."""
        wait = self._previews.take(owner)
        if wait:
            raise TooManyRequests(
                "Too many previews at once; the meter catches up when you pause.",
                retry_after=max(1, math.ceil(wait)),
            )
        limit = self._settings.max_message_chars
        text = checked_text(content, limit)
        attached = await read_files(self._db, owner, files, self._settings.max_files_per_message)
        text = with_text_files(text, attached, limit)
        planned, seq, fit = await self._db.read(self._plan, owner, conversation_id, text, attached)
        now = utcnow()
        row = as_loaded(
            Message,
            {
                **MESSAGE_DEFAULTS,
                "id": None,
                "conversation_id": conversation_id,
                "seq": seq,
                "role": Role.USER,
                "content": text,
                "created_at": now,
                "updated_at": now,
                "token_counts": None,
                **fit,
            },
        )
        return row, planned.fit

    def _plan(
        self,
        session: Session,
        owner: str,
        conversation_id: str,
        text: str,
        files: list[StoredFile],
    ) -> tuple[Plan, int, dict[str, object]]:
        connection = session.connection()
        conversation = owned_in(connection, owner, conversation_id)
        self._recent.remember(conversation.id, conversation.configuration)
        read = read_for_send(connection, self._manager, owner, conversation, text, files=files)
        if isinstance(read.route, RoutingError):
            raise InvalidInput(str(read.route))
        assert read.transcript is not None, "a routed read has its transcript"
        planned = self._manager.plan(
            read.route, read.transcript, caller=owner, max_tokens=read.max_tokens
        )
        fit = fit_columns(planned.fit, planned.transcript)
        fit = {
            **with_left_out_files(connection, conversation.id, fit),
            "attachments": read.attachments,
        }
        return planned, read.tail.next_seq, fit
