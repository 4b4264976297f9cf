"""Sharing a conversation by a read-only link: make one, list and revoke the owner's, and
open one by its token (see `webapp.chat.stored.shares` for what a share records)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlmodel import Session, col

from webapp.chat.stored.attachments import split_attachment
from webapp.chat.stored.branches import whole_branch
from webapp.chat.stored.history import read_branch
from webapp.chat.stored.models import Message, Status
from webapp.chat.stored.rows import owned_in
from webapp.chat.stored.shares import Share, new_token, token_hash
from webapp.chat.stored.titles import title_from
from webapp.db import Database
from webapp.errors import InvalidInput, NotFound

SHARES_MAX = 200
"""Links one owner keeps at a time: a script cannot fill the table."""
_NOT_FOUND = "no such shared conversation: the link is wrong or was revoked"


@dataclass(frozen=True, slots=True)
class Opened:
    """A share as its page shows it: the record and the branch it froze, oldest first."""

    share: Share
    rows: list[Message]


def shared_title(title: str, first: str, with_attachments: bool) -> str:
    """The title a link shows: a title made from a first message with a file attached
    holds the file's first words, so without attachments it is made from what was typed."""
    typed, attachment, _, _ = split_attachment(first)
    if with_attachments or attachment is None or title != title_from(first):
        return title
    return title_from(typed) if typed.strip() else "Shared conversation"


class SharedLinks:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def create(
        self, owner: str, conversation_id: str, *, author: str | None, with_attachments: bool
    ) -> tuple[Share, str]:
        """A new link to the conversation's active branch as it is now (an answer still
        being written is left out with its question); the share and its token, which is
        never stored and so shown only now."""
        token = new_token()

        def make(session: Session) -> Share:
            connection = session.connection()
            conversation = owned_in(connection, owner, conversation_id)
            held = connection.execute(
                select(func.count()).select_from(Share).where(col(Share.owner) == owner)
            ).scalar()
            if (held or 0) >= SHARES_MAX:
                raise InvalidInput(f"you have {SHARES_MAX} shared links: revoke one first")
            branch = read_branch(connection, conversation_id, conversation.active_seq)
            rows = whole_branch(connection, conversation_id, branch)
            while rows and rows[-1].status == Status.STREAMING:
                rows = rows[:-2]
            if not rows:
                raise InvalidInput("there is nothing to share yet: send a message first")
            share = Share(
                token_hash=token_hash(token),
                conversation_id=conversation_id,
                owner=owner,
                upto_seq=rows[-1].seq,
                title=shared_title(conversation.title, rows[0].content, with_attachments),
                author=author,
                with_attachments=with_attachments,
            )
            session.add(share)
            return share

        return await self._db.write(make), token

    async def owned(self, owner: str) -> list[Share]:
        """The owner's links, newest first."""

        def read(session: Session) -> list[Share]:
            query = (
                select(Share)
                .where(col(Share.owner) == owner)
                .order_by(col(Share.created_at).desc(), col(Share.id))
            )
            return list(session.scalars(query))

        return await self._db.read(read)

    async def revoke(self, owner: str, share_id: str) -> None:
        """Delete the owner's link (another owner's is not found): it answers 404 from now."""

        def remove(session: Session) -> None:
            done = session.connection().execute(
                delete(Share).where(col(Share.id) == share_id, col(Share.owner) == owner)
            )
            if not done.rowcount:
                raise NotFound("no such shared link")

        await self._db.write(remove)

    async def open(self, token: str) -> Opened:
        """The share a token names, and the rows it shows; NotFound for any other token."""
        if not 20 <= len(token) <= 100:
            raise NotFound(_NOT_FOUND)

        def read(session: Session) -> Opened:
            share = session.scalars(
                select(Share).where(col(Share.token_hash) == token_hash(token))
            ).first()
            if share is None:
                raise NotFound(_NOT_FOUND)
            connection = session.connection()
            branch = read_branch(connection, share.conversation_id, share.upto_seq)
            return Opened(share, whole_branch(connection, share.conversation_id, branch))

        return await self._db.read(read)
