"""Changing conversations: create, import, rename, switch configuration, pin a turn, show
another branch, fork, delete, purge. Sending a message is `send`'s job."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, insert, update
from sqlmodel import Session, col, select

from webapp.chat.answering.notify import announce_title
from webapp.chat.answering.stopping import AnswerStopper
from webapp.chat.reading import ConversationReader
from webapp.chat.stored.branches import leaf_through, renumbered, whole_branch
from webapp.chat.stored.chatgpt import Skipped, parse_chatgpt
from webapp.chat.stored.feedback import toggled
from webapp.chat.stored.history import is_replayable, read_branch
from webapp.chat.stored.models import Conversation, Message, Role, Status, Summary
from webapp.chat.stored.organising import BULK_MAX, BulkAction, Kind, set_tags, tags_of
from webapp.chat.stored.presets import Preset, default_preset, owned_preset, preset_named
from webapp.chat.stored.rows import check_id, owned_in, row_in
from webapp.chat.stored.steps import turn_end
from webapp.chat.stored.summaries import edit_newest
from webapp.chat.stored.titles import DEFAULT_TITLE, clean_title, fork_title, import_title
from webapp.chat.stored.transfer import Imported, decode_export, parse_export
from webapp.db import Database, as_loaded
from webapp.errors import Conflict, InvalidInput, NotFound
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager
from webapp.owners import owner_columns
from webapp.timeutil import utcnow
from webapp.web.markdown import render_markdown_async

IMPORT_CHUNK_ROWS = 500
"""Rows an import writes per statement: on PostgreSQL each statement's rows are made
ready on the loop, so a chunk is a short step, not the whole import."""


class ConversationEditor:
    """Reads the catalog through the manager: discovery at start replaces it."""

    def __init__(
        self,
        db: Database,
        manager: LLMManager,
        reader: ConversationReader,
        stopper: AnswerStopper,
    ) -> None:
        self._db = db
        self._manager = manager
        self._reader = reader
        self._recent = reader.recent
        self._stopper = stopper

    def check_configuration(self, configuration: str) -> None:
        configurations = self._manager.catalog.configurations
        if configuration not in configurations:
            known = ", ".join(configurations)
            raise InvalidInput(f"unknown configuration {configuration!r}; known: {known}")

    async def create(
        self,
        owner: str,
        configuration: str | None = None,
        title: str | None = None,
        *,
        chosen: bool = True,
    ) -> Conversation:
        """A new conversation; unless its configuration was `chosen` by the caller, the
        owner's default preset, if any, decides it (`with_default_preset`)."""
        configuration = configuration or self._manager.catalog.default_configuration
        self.check_configuration(configuration)
        conversation = Conversation(
            owner=owner,
            **owner_columns(owner),
            configuration=configuration,
            title=clean_title(title) if title is not None else DEFAULT_TITLE,
        )

        def store(session: Session) -> None:
            if not chosen:
                self.with_default_preset(session, conversation)
            session.add(conversation)

        await self._db.write(store)
        self._recent.remember(conversation.id, conversation.configuration)
        return conversation

    def _with_preset_named(
        self, session: Session, conversation: Conversation, name: str | None
    ) -> None:
        """An imported conversation's preset: the importing owner's of that name, while
        the catalog has its configuration; none otherwise, and no error."""
        preset = preset_named(session.connection(), conversation.owner, name) if name else None
        self._use_preset(conversation, preset)

    def _use_preset(self, conversation: Conversation, preset: Preset | None) -> None:
        """Put a new conversation on `preset` (and its configuration), if the catalog still
        has that configuration."""
        if preset is None or preset.configuration not in self._manager.catalog.configurations:
            return
        if conversation.configuration != preset.configuration:
            conversation.cut_reset = True
        conversation.configuration = preset.configuration
        conversation.preset_id = preset.id

    def with_default_preset(self, session: Session, conversation: Conversation) -> None:
        """Give a new conversation its owner's default preset (and the preset's
        configuration), while the catalog still has that configuration."""
        self._use_preset(conversation, default_preset(session.connection(), conversation.owner))

    async def fresh(
        self, owner: str, configuration: str | None = None, *, chosen: bool = True
    ) -> Conversation:
        """A conversation to start typing in: the owner's newest one that holds no message
        yet and was never renamed, switched to `configuration` (or, unless it was
        `chosen`, to the owner's default preset), else a new one. Clicking "New
        conversation" again and again stores one empty conversation, not many."""
        configuration = configuration or self._manager.catalog.default_configuration
        self.check_configuration(configuration)

        def reuse(session: Session) -> Conversation | None:
            has_message = select(Message.id).where(Message.conversation_id == Conversation.id)
            empty = session.exec(
                select(Conversation)
                .where(
                    col(Conversation.owner) == owner,
                    col(Conversation.title) == DEFAULT_TITLE,
                    col(Conversation.archived).is_(False),
                    ~has_message.exists(),
                )
                .order_by(col(Conversation.updated_at).desc())
                .limit(1)
            ).first()
            if empty is None:
                return None
            if empty.configuration != configuration:
                empty.cut_reset = True
            empty.configuration = configuration
            empty.preset_id = None
            if not chosen:
                self.with_default_preset(session, empty)
            empty.updated_at = utcnow()
            session.add(empty)
            return empty

        found = await self._db.write(reuse)
        if found is None:
            return await self.create(owner, configuration, chosen=chosen)
        self._recent.remember(found.id, found.configuration)
        return found

    async def import_conversation(self, owner: str, data: bytes | object) -> Conversation:
        """A new conversation of `owner` holding a JSON export's messages and fit facts,
        as they were; `prior_turns` is recounted, answers are rendered once more. `data`:
        the export's bytes, or its decoded JSON. Decoding and checking run on a thread
        (20,000 messages are a second of CPU), the rows are written a chunk at a time,
        and answers render as `render_markdown_async` renders them: no step holds the
        loop for long, whatever the import's size."""
        catalog = self._manager.catalog
        imported = await asyncio.to_thread(
            lambda: parse_export(
                decode_export(data) if isinstance(data, bytes) else data,
                default_configuration=catalog.default_configuration,
                known=set(catalog.configurations),
            )
        )
        (conversation,) = await self._store_imports(owner, [imported])
        return conversation

    async def import_chatgpt(
        self, owner: str, data: list[Any]
    ) -> tuple[list[Conversation], list[Skipped]]:
        """ChatGPT's `conversations.json`: each conversation with a turn in it becomes one
        of `owner`'s, all in one transaction (a bad one stores none); the others are
        said with why they were left out."""
        catalog = self._manager.catalog
        imported, skipped = await asyncio.to_thread(
            parse_chatgpt,
            data,
            default_configuration=catalog.default_configuration,
            known=set(catalog.configurations),
        )
        return await self._store_imports(owner, imported), skipped

    async def _store_imports(self, owner: str, imports: list[Imported]) -> list[Conversation]:
        """Store checked imports together; `prior_turns` and turn numbers recounted."""
        prepared = [await self._imported_rows(owner, imported) for imported in imports]

        def store(session: Session) -> None:
            for (conversation, rows), imported in zip(prepared, imports, strict=True):
                self._with_preset_named(session, conversation, imported.preset)
                session.add(conversation)
                session.flush()
                connection = session.connection()
                for start in range(0, len(rows), IMPORT_CHUNK_ROWS):
                    chunk = rows[start : start + IMPORT_CHUNK_ROWS]
                    connection.execute(
                        insert(Message),
                        [{**values, "conversation_id": conversation.id} for values in chunk],
                    )
                if imported.summaries:
                    connection.execute(
                        insert(Summary),
                        [{**s, "conversation_id": conversation.id} for s in imported.summaries],
                    )

        await self._db.write(store)
        for conversation, _ in prepared:
            self._recent.remember(conversation.id, conversation.configuration)
        return [conversation for conversation, _ in prepared]

    async def _imported_rows(
        self, owner: str, imported: Imported
    ) -> tuple[Conversation, list[dict[str, Any]]]:
        now = utcnow()
        conversation = Conversation(
            owner=owner,
            **owner_columns(owner),
            configuration=imported.configuration,
            title=import_title(clean_title(imported.title)),
            kind=Kind.IMPORT,
            created_at=imported.created_at or now,
            updated_at=now,
        )
        conversation.active_seq = imported.active_seq
        # prior_turns speaks of each row's own branch: the replayable turns on the path up
        # to the row it continues (`upto`, by seq; 0 is the very start).
        rows: list[dict[str, Any]] = []
        upto = {0: 0}
        turns = {0: 0}  # the same for user rows, failed turns included: turn numbers
        for values in imported.messages:
            values = {**values, "created_at": values["created_at"] or now, "updated_at": now}
            seq = values["seq"]
            parent = values["parent_seq"] if values["parent_seq"] is not None else seq - 1
            if values["estimated_tokens"] is None:
                values["estimated_tokens"] = estimate_message(values)
            if values["role"] == Role.USER:
                values["prior_turns"] = upto[parent]
                upto[seq] = upto[parent]
                values["turn_number"] = turns[seq] = turns[parent] + 1
            elif values["role"] == Role.TOOL or values.get("tool_calls"):  # a tool step
                upto[seq], turns[seq] = upto[parent], turns[parent]
            else:
                upto[seq] = upto[parent] + is_replayable(values["status"], values["content"])
                turns[seq] = turns[parent]
                values["content_html"] = str(await render_markdown_async(values["content"]))
            rows.append(values)
        # Every row with the same keys: one statement writes many.
        columns = set().union(*rows) if rows else set()
        return conversation, [{column: row.get(column) for column in columns} for row in rows]

    async def organise(
        self,
        owner: str,
        conversation_id: str,
        *,
        pinned: bool | None = None,
        archived: bool | None = None,
        tags: list[str] | None = None,
    ) -> tuple[Conversation, list[str]]:
        """Pin, archive and tag (`tags`: the whole set, cleaned), together or not at all;
        the conversation and its tags after. Not a use: `updated_at` stays."""

        def change(session: Session) -> tuple[Conversation, list[str]]:
            connection = session.connection()
            conversation = owned_in(connection, owner, conversation_id)
            values = {
                name: value
                for name, value in (("pinned", pinned), ("archived", archived))
                if value is not None
            }
            if values:
                connection.execute(
                    update(Conversation)
                    .where(col(Conversation.id) == conversation_id)
                    .values(**values)
                )
            if tags is not None:
                set_tags(connection, conversation_id, tags)
            now_tags = tags_of(connection, [conversation_id]).get(conversation_id, [])
            changed = as_loaded(Conversation, {**conversation.model_dump(), **values})
            return changed, now_tags

        return await self._db.write(change)

    async def bulk(self, owner: str, conversation_ids: list[str], action: BulkAction) -> int:
        """Archive, unarchive or delete several of the owner's conversations at once: all
        of them or, if any is not the owner's (or does not exist), none (404)."""
        ids = list(dict.fromkeys(conversation_ids))
        if not ids:
            raise InvalidInput("name at least one conversation in ids")
        if len(ids) > BULK_MAX:
            raise InvalidInput(f"a bulk action names at most {BULK_MAX} conversations")

        def owned_all(session: Session) -> None:
            found = session.connection().execute(
                select(func.count())
                .select_from(Conversation)
                .where(col(Conversation.id).in_(ids), col(Conversation.owner) == owner)
            )
            if found.scalar() != len(ids):
                raise NotFound("no such conversation: one of the ids is not yours")

        await self._db.read(owned_all)
        if action == "delete":
            for conversation_id in ids:  # its answers stop before its rows go
                await self._stopper.halt(owner, conversation_id)

        def apply(session: Session) -> int:
            owned_all(session)  # again, in the writing transaction
            mine = col(Conversation.id).in_(ids), col(Conversation.owner) == owner
            connection = session.connection()
            if action == "delete":
                connection.execute(delete(Conversation).where(*mine))
            else:
                archived = action == "archive"
                connection.execute(update(Conversation).where(*mine).values(archived=archived))
            return len(ids)

        return await self._db.write(apply)

    async def rename(self, owner: str, conversation_id: str, title: str) -> Conversation:
        return await self._change(owner, conversation_id, title=clean_title(title))

    async def _change(self, owner: str, conversation_id: str, **values: object) -> Conversation:
        """Set columns of the owner's conversation, and its `updated_at`."""

        def change(session: Session) -> Conversation:
            conversation = self._reader.owned(session, owner, conversation_id)
            for name, value in values.items():
                setattr(conversation, name, value)
            conversation.updated_at = utcnow()
            session.add(conversation)
            if "title" in values:  # the pages waiting for a title, in every worker
                announce_title(session.connection(), conversation_id)
            return conversation

        return await self._db.write(change)

    async def set_configuration(
        self, owner: str, conversation_id: str, configuration: str
    ) -> Conversation:
        """Switch the conversation to another configuration: the next send is bounded
        against its model. Nothing already stored changes."""
        self.check_configuration(configuration)
        conversation = await self._change(
            owner, conversation_id, configuration=configuration, preset_id=None, cut_reset=True
        )
        self._recent.remember(conversation_id, configuration)
        return conversation

    async def set_summarize(
        self, owner: str, conversation_id: str, summarize: bool
    ) -> Conversation:
        """Turn summaries of what the cut left out on or off for this conversation (its
        configuration's `summarize` no longer decides). The request changes right after
        the head, so the next send starts its cut afresh."""
        return await self._change(owner, conversation_id, summarize=summarize, cut_reset=True)

    async def edit_summary(
        self, owner: str, conversation_id: str, summary_id: int, content: str
    ) -> Summary:
        """The owner's edit of the active branch's newest summary: the next send carries it
        (one cache miss: the request changes right after the head)."""

        def change(session: Session) -> Summary:
            conversation = self._reader.owned(session, owner, conversation_id)
            connection = session.connection()
            branch = read_branch(connection, conversation_id, conversation.active_seq)
            return edit_newest(connection, conversation_id, branch, summary_id, content)

        return await self._db.write(change)

    async def set_preset(
        self, owner: str, conversation_id: str, preset_id: int | None
    ) -> Conversation:
        """Use one of the owner's presets (another user's is a 404): the conversation takes
        its configuration, and the next send its system prompt, answer room and
        temperature; None goes back to the configuration alone."""

        def change(session: Session) -> Conversation:
            conversation = self._reader.owned(session, owner, conversation_id)
            if preset_id is not None:
                preset = owned_preset(session.connection(), owner, preset_id)
                self.check_configuration(preset.configuration)
                conversation.configuration = preset.configuration
            conversation.preset_id = preset_id
            conversation.cut_reset = True
            conversation.updated_at = utcnow()
            session.add(conversation)
            return conversation

        conversation = await self._db.write(change)
        self._recent.remember(conversation_id, conversation.configuration)
        return conversation

    async def pin(
        self, owner: str, conversation_id: str, message_id: int, pinned: bool = True
    ) -> Message:
        """Pin (or unpin) a user turn: a pinned turn is sent on every later send, after the
        head, as long as head, pins and the newest turn fit."""
        check_id(message_id)

        def change(session: Session) -> Message:
            conversation = self._reader.owned(session, owner, conversation_id)
            row = session.get(Message, message_id)
            if row is None or row.conversation_id != conversation_id:
                raise NotFound("no such message")
            if row.role != Role.USER:
                raise InvalidInput("only a user's message can be pinned: it pins its whole turn")
            if row.pinned != pinned:
                conversation.cut_reset = True
                session.add(conversation)
            row.pinned = pinned
            row.updated_at = utcnow()
            session.add(row)
            return row

        return await self._db.write(change)

    async def feedback(
        self,
        owner: str,
        conversation_id: str,
        answer_id: int,
        value: int | None,
        *,
        toggle: bool = False,
    ) -> Message:
        """Rate an answer up (1) or down (-1), or take the rating back (None). With
        `toggle`, the thumb already given is taken back instead (the page's buttons)."""
        check_id(answer_id)

        def change(session: Session) -> Message:
            self._reader.owned(session, owner, conversation_id)
            row = session.get(Message, answer_id)
            if row is None or row.conversation_id != conversation_id:
                raise NotFound("no such message")
            if row.role != Role.ASSISTANT:
                raise InvalidInput("feedback is given on an answer, not on a question")
            if row.status == Status.STREAMING:
                raise Conflict("the answer is still being written: rate it when it is done")
            row.feedback = toggled(row.feedback, value) if toggle and value is not None else value
            session.add(row)
            return row

        return await self._db.write(change)

    async def delete(self, owner: str, conversation_id: str) -> None:
        """Delete the conversation with its messages, once this worker's answer in it (if
        any) has stopped: its task must not write rows that are gone."""
        await self._stopper.halt(owner, conversation_id)

        def remove(session: Session) -> None:
            session.delete(self._reader.owned(session, owner, conversation_id))

        await self._db.write(remove)

    async def purge_idle(self, days: float, *, dry_run: bool = False) -> list[Conversation]:
        """Delete conversations nobody touched for `days` days (messages go with them)."""
        cutoff = utcnow() - timedelta(days=days)

        def purge(session: Session) -> list[Conversation]:
            idle = list(
                session.exec(
                    select(Conversation)
                    .where(col(Conversation.updated_at) < cutoff)
                    .order_by(col(Conversation.updated_at))
                )
            )
            if not dry_run and idle:
                session.connection().execute(
                    delete(Conversation).where(col(Conversation.id).in_([c.id for c in idle]))
                )
            return idle

        return await self._db.write(purge)

    async def branch(self, owner: str, conversation_id: str, message_id: int) -> Conversation:
        """Show and continue the branch through a message, down to its newest leaf."""
        check_id(message_id)

        def switch(session: Session) -> Conversation:
            connection = session.connection()
            conversation = owned_in(connection, owner, conversation_id)
            row = row_in(connection, conversation_id, message_id)
            leaf = leaf_through(connection, conversation_id, row.seq)
            newest = connection.execute(
                select(func.max(Message.seq)).where(Message.conversation_id == conversation_id)
            ).scalar()
            active = None if leaf == newest else leaf
            connection.execute(
                update(Conversation)
                .where(col(Conversation.id) == conversation_id)
                .values(active_seq=active, cut_reset=True)
            )
            return as_loaded(
                Conversation, {**conversation.model_dump(), "active_seq": active, "cut_reset": True}
            )

        return await self._db.write(switch)

    async def fork(self, owner: str, conversation_id: str, message_id: int) -> Conversation:
        """A new conversation (same owner, configuration and preset) holding the branch up
        to and including the turn of a message, renumbered from 1, every fit fact kept."""
        check_id(message_id)

        def copy(session: Session) -> Conversation:
            connection = session.connection()
            source = owned_in(connection, owner, conversation_id)
            row = row_in(connection, conversation_id, message_id)
            end = row.seq + 1 if row.role == Role.USER else row.seq
            end = turn_end(connection, conversation_id, end)  # with the turn's tool steps
            rows = whole_branch(
                connection, conversation_id, read_branch(connection, conversation_id, end)
            )
            if any(r.status == Status.STREAMING for r in rows):
                raise Conflict("this answer is still being written; fork it once it is done")
            now = utcnow()
            fork = Conversation(
                owner=owner,
                **owner_columns(owner),
                configuration=source.configuration,
                preset_id=source.preset_id,
                title=fork_title(source.title),
                kind=Kind.FORK,
                created_at=now,
                updated_at=now,
            )
            connection.execute(insert(Conversation).values(fork.model_dump()))
            copies = renumbered(rows, fork.id)
            if copies:
                connection.execute(insert(Message), copies)
            return fork

        fork = await self._db.write(copy)
        self._recent.remember(fork.id, fork.configuration)
        return fork
