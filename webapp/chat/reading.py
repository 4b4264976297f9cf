"""Reading conversations: one, a list, a page of the active branch, the whole record,
single messages, alternatives and search. Reads never write, except that an answer whose
writer died is reaped first, so a page never shows it as still streaming."""

from __future__ import annotations

from sqlmodel import Session, col, select

from webapp.chat.answering.reaping import Reaper
from webapp.chat.sending.counting import RecentConfigurations
from webapp.chat.stored.branches import Alternatives, alternatives, newest_on_branch, whole_branch
from webapp.chat.stored.history import read_branch
from webapp.chat.stored.models import Conversation, Message, Role, Status, Summary
from webapp.chat.stored.organising import ConversationTag, clean_tag, tagged, tags_of
from webapp.chat.stored.rows import check_id
from webapp.chat.stored.search import Hit, search_messages, search_words
from webapp.chat.stored.summaries import on_branch
from webapp.db import Database
from webapp.errors import Conflict, InvalidInput, NotFound

LENGTH_CUT = "length"
"""The finish reason of an answer that stopped at its token limit, not at its end."""


class ConversationReader:
    def __init__(self, db: Database, reaper: Reaper, recent: RecentConfigurations) -> None:
        self._db = db
        self._reaper = reaper
        self.recent = recent
        """What the reads saw of each conversation's configuration, for the send path."""

    def owned(self, session: Session, owner: str, conversation_id: str) -> Conversation:
        """The owner's conversation (anyone else's is not found). Seeing it tells the send
        path which configuration to count its next message for."""
        conversation = session.get(Conversation, conversation_id)
        if conversation is None or conversation.owner != owner:
            raise NotFound("no such conversation")
        self.recent.remember(conversation.id, conversation.configuration)
        return conversation

    async def get(self, owner: str, conversation_id: str) -> Conversation:
        return await self._db.read(self.owned, owner, conversation_id)

    async def conversations(
        self,
        owner: str,
        limit: int = 200,
        offset: int = 0,
        *,
        archived: bool | None = False,
        tag: str | None = None,
    ) -> list[Conversation]:
        """Pinned first, then the most recently used. `archived`: only those archived
        (True), only those not (False, the sidebar's), or both (None); `tag` (cleaned):
        only those carrying it."""

        def read(session: Session) -> list[Conversation]:
            query = select(Conversation).where(Conversation.owner == owner)
            if archived is not None:
                query = query.where(col(Conversation.archived) == archived)
            if tag is not None:
                query = query.where(tagged(tag))
            query = (
                query.order_by(
                    col(Conversation.pinned).desc(),
                    col(Conversation.updated_at).desc(),
                    col(Conversation.id),
                )
                .offset(offset)
                .limit(limit)
            )
            return list(session.exec(query))

        return await self._db.read(read)

    async def tags_of(self, conversation_ids: list[str]) -> dict[str, list[str]]:
        """Each conversation's tags (of conversations already found to be the caller's)."""
        return await self._db.read(lambda session: tags_of(session.connection(), conversation_ids))

    async def owner_tags(self, owner: str) -> list[str]:
        """Every tag on `owner`'s conversations, once each, alphabetically: the filter's."""

        def read(session: Session) -> list[str]:
            query = (
                select(ConversationTag.tag)
                .join(Conversation, col(Conversation.id) == ConversationTag.conversation_id)
                .where(Conversation.owner == owner)
                .distinct()
                .order_by(col(ConversationTag.tag))
            )
            return list(session.exec(query))

        return await self._db.read(read)

    async def search(self, owner: str, query: object, tag: str | None = None) -> list[Hit]:
        """`owner`'s finished messages that contain every word of `query`, best first;
        with `tag`, only in conversations carrying it."""
        words = search_words(query)  # a bad query is refused before any database work
        wanted = clean_tag(tag) if tag else None  # `&tag=` left empty: no filter
        return await self._db.read(
            lambda session: search_messages(session.connection(), owner, " ".join(words), wanted)
        )

    async def record(self, owner: str, conversation_id: str) -> tuple[Conversation, list[Message]]:
        """Every stored message of every branch, in seq order: what an export carries."""

        def read(session: Session) -> tuple[Conversation, list[Message]]:
            conversation = self.owned(session, owner, conversation_id)
            query = (
                select(Message)
                .where(Message.conversation_id == conversation_id)
                .order_by(col(Message.seq))
            )
            return conversation, list(session.exec(query))

        return await self._db.read(read)

    async def history(self, owner: str, conversation_id: str) -> tuple[Conversation, list[Message]]:
        """The active branch, oldest first (see `alternatives_of` for its alternatives)."""
        await self._reaper.reap_stale(conversation_id)

        def read(session: Session) -> tuple[Conversation, list[Message]]:
            conversation = self.owned(session, owner, conversation_id)
            connection = session.connection()
            branch = read_branch(connection, conversation_id, conversation.active_seq)
            return conversation, whole_branch(connection, conversation_id, branch)

        return await self._db.read(read)

    async def summaries(self, owner: str, conversation_id: str) -> list[Summary]:
        """The summaries of the active branch, oldest version first."""

        def read(session: Session) -> list[Summary]:
            conversation = self.owned(session, owner, conversation_id)
            connection = session.connection()
            branch = read_branch(connection, conversation_id, conversation.active_seq)
            return on_branch(connection, conversation_id, branch)

        return await self._db.read(read)

    async def history_by_pages(
        self, owner: str, conversation_id: str, turns: int = 250
    ) -> tuple[Conversation, list[Message]]:
        """`history`, read `turns` turns at a time (`page`): for a branch that may be very
        long (an import's answer), as on PostgreSQL a read's rows are made on the loop."""
        rows: list[Message] = []
        before: int | None = None
        while True:
            conversation, page, more = await self.page(
                owner, conversation_id, before_seq=before, turns=turns
            )
            rows[:0] = page
            if not more or not page:
                return conversation, rows
            before = page[0].seq

    async def page(
        self,
        owner: str,
        conversation_id: str,
        *,
        before_seq: int | None = None,
        turns: int = 50,
        through_message: int | None = None,
    ) -> tuple[Conversation, list[Message], bool]:
        """The newest `turns` turns of the active branch before `before_seq` (default: the
        newest of all), oldest first, and whether older ones exist. A page of a long
        conversation reads only that; `through_message` (a search hit) reaches back far
        enough to include that message when it is on the active branch."""
        await self._reaper.reap_stale(conversation_id)

        def read(session: Session) -> tuple[Conversation, list[Message], bool]:
            conversation = self.owned(session, owner, conversation_id)
            wanted = session.get(Message, through_message) if through_message else None
            if wanted is not None and wanted.conversation_id != conversation_id:
                wanted = None
            connection = session.connection()
            branch = read_branch(connection, conversation_id, conversation.active_seq)
            below = branch.leaf + 1 if before_seq is None else before_seq
            size = 2 * turns
            if wanted is not None:
                # Seqs of other branches lie between: reading by seq distance is enough.
                size = max(size, below - wanted.seq + 2)
            rows = newest_on_branch(connection, conversation_id, branch, below, size)
            if rows and rows[-1].role == Role.ASSISTANT:
                rows.pop()  # start a page on a user row so a turn is never split
            rows.reverse()
            return conversation, rows, bool(rows) and rows[0].seq > branch.first

        return await self._db.read(read)

    async def alternatives_of(
        self, conversation_id: str, rows: list[Message]
    ) -> dict[int, Alternatives]:
        """The alternatives of the user rows among `rows` (of a conversation already checked)."""
        users = [row for row in rows if row.role == Role.USER]

        def read(session: Session) -> dict[int, Alternatives]:
            return alternatives(session.connection(), conversation_id, users)

        return await self._db.read(read)

    async def message(self, owner: str, conversation_id: str, message_id: int) -> Message:
        check_id(message_id)

        def read(session: Session) -> Message:
            self.owned(session, owner, conversation_id)
            row = session.get(Message, message_id)
            if row is None or row.conversation_id != conversation_id:
                raise NotFound("no such message")
            return row

        return await self._db.read(read)

    async def continuable(
        self, owner: str, conversation_id: str, answer_id: int
    ) -> tuple[Message, Message]:
        """The newest answer of the shown branch, which its length limit cut off, and the
        user turn it answers: what Continue may go on with (a clear 4xx otherwise)."""
        answer = await self.message(owner, conversation_id, answer_id)
        if answer.role != Role.ASSISTANT or answer.finish_reason != LENGTH_CUT:
            raise InvalidInput("only an answer cut off by its length limit can be continued")
        if answer.status != Status.COMPLETE:
            # An import may carry any finish reason on a failed or stopped row.
            raise Conflict(
                f"this answer is {answer.status}, not complete: it cannot be continued; "
                "retry it or send a message instead"
            )
        _, rows, _ = await self.page(owner, conversation_id, turns=1)
        if not rows or rows[-1].id != answer_id:
            raise Conflict("only the newest answer can be continued: send a message instead")
        return await self.user_row_of(answer), answer

    async def user_row_of(self, answer: Message) -> Message:
        """The user row an answer answers: always the row just before it."""

        def read(session: Session) -> Message:
            return session.exec(
                select(Message).where(
                    Message.conversation_id == answer.conversation_id,
                    Message.seq == answer.seq - 1,
                )
            ).one()

        return await self._db.read(read)
