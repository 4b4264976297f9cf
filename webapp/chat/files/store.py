"""The files' database work: one upload kept (its bytes once per owner and hash, within
the owner's quota), one read back, one deleted when no message uses it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, exists, func, insert, select

from webapp.accounts.models import User
from webapp.chat.files.inspect import Inspected
from webapp.chat.files.models import FileBlob, MessageFile, StoredFile, new_file_id
from webapp.db import as_loaded
from webapp.errors import Conflict, NotFound, TooLarge
from webapp.owners import owner_columns
from webapp.timeutil import utcnow

BLOBS = FileBlob.__table__  # type: ignore[attr-defined]
FILES = StoredFile.__table__  # type: ignore[attr-defined]
USES = MessageFile.__table__  # type: ignore[attr-defined]


def used_bytes(connection: Connection, owner: str) -> int:
    """What an owner's files take: each distinct content once."""
    total = connection.execute(
        select(func.coalesce(func.sum(BLOBS.c.size), 0)).where(BLOBS.c.owner == owner)
    ).scalar_one()
    return int(total)


def keep_file(
    connection: Connection, owner: str, name: str, kept: Inspected, quota: int
) -> StoredFile:
    """A new file of `owner`'s, its bytes shared with any earlier upload of the same
    content; TooLarge when new bytes would pass `quota` (0: no quota). Uploads of one user
    take turns (their account row is locked), so two at once cannot both pass the quota
    or both store the same bytes."""
    keys = owner_columns(owner)
    user_id = keys.get("user_id")
    if user_id is not None:
        account = User.__table__  # type: ignore[attr-defined]
        connection.execute(select(account.c.id).where(account.c.id == user_id).with_for_update())
    blob_id = connection.execute(
        select(BLOBS.c.id).where(BLOBS.c.owner == owner, BLOBS.c.sha256 == kept.sha256)
    ).scalar_one_or_none()
    if blob_id is None:
        used = used_bytes(connection, owner)
        if quota and used + len(kept.data) > quota:
            raise TooLarge(
                f"{name} ({len(kept.data):,} bytes) would pass your storage quota: "
                f"{used:,} of {quota:,} bytes are used; delete files you no longer need"
            )
        blob_id = connection.execute(
            insert(BLOBS)
            .values(
                owner=owner,
                user_id=user_id,
                sha256=kept.sha256,
                size=len(kept.data),
                data=kept.data,
            )
            .returning(BLOBS.c.id)
        ).scalar_one()
    values: dict[str, Any] = {
        "id": new_file_id(),
        "owner": owner,
        "user_id": user_id,
        "blob_id": blob_id,
        "name": name,
        "media_type": kept.media_type,
        "kind": kind_of(kept),
        "size": len(kept.data),
        "sha256": kept.sha256,
        "width": kept.width,
        "height": kept.height,
        "text": kept.text,
        "token_counts": None,
        "created_at": utcnow(),
    }
    connection.execute(insert(FILES).values(**values))
    return as_loaded(StoredFile, values)


def kind_of(kept: Inspected) -> str:
    if kept.width is not None:
        return "image"
    return "document" if kept.media_type == "application/pdf" else "text"


def file_row(connection: Connection, owner: str | None, file_id: str) -> StoredFile:
    """A file by id, its owner's (`owner` None: anyone's, for an admin); NotFound
    otherwise, the same answer whether the file is someone else's or does not exist."""
    query = select(FILES).where(FILES.c.id == file_id)
    if owner is not None:
        query = query.where(FILES.c.owner == owner)
    row = connection.execute(query).mappings().one_or_none()
    if row is None:
        raise NotFound("no such file")
    return as_loaded(StoredFile, dict(row))


def file_bytes(connection: Connection, owner: str | None, file_id: str) -> tuple[StoredFile, bytes]:
    found = file_row(connection, owner, file_id)
    data = connection.execute(select(BLOBS.c.data).where(BLOBS.c.id == found.blob_id)).scalar_one()
    return found, bytes(data)


def delete_file(connection: Connection, owner: str, file_id: str) -> None:
    """The file gone, and its bytes with it when no other upload shares them; Conflict
    while a message uses it."""
    found = file_row(connection, owner, file_id)
    if connection.execute(select(exists().where(USES.c.file_id == file_id))).scalar():
        raise Conflict(f"{found.name} is attached to a message: delete the conversation first")
    connection.execute(delete(FILES).where(FILES.c.id == file_id))
    shared = select(exists().where(FILES.c.blob_id == found.blob_id))
    if not connection.execute(shared).scalar():
        connection.execute(delete(BLOBS).where(BLOBS.c.id == found.blob_id))
