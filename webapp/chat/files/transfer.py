"""A conversation's files in its JSON export and back (docs/usage.md, Export and import):
the export lists every file its messages carry with the bytes (base64), and an import
takes them again as the importer's own uploads (checked as any upload is: type, size,
quota, pictures and PDFs read in the reader process), then gives the imported messages
their files back under the new ids, with the counts they were exported with."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Protocol

from sqlalchemy import Connection, insert, select, update
from sqlmodel import Session

from webapp.chat.files.models import StoredFile
from webapp.chat.files.service import FileStore
from webapp.chat.files.store import BLOBS, FILES, USES
from webapp.chat.stored.models import Conversation, Message
from webapp.db import Database
from webapp.errors import InvalidInput

MESSAGES = Message.__table__  # type: ignore[attr-defined]


def export_files(session: Session, conversation_id: str) -> list[dict[str, Any]]:
    """Every file the conversation's messages carry, once, with its bytes."""
    used = (
        select(USES.c.file_id)
        .join(MESSAGES, MESSAGES.c.id == USES.c.message_id)
        .where(MESSAGES.c.conversation_id == conversation_id)
    )
    rows = session.connection().execute(
        select(FILES.c.id, FILES.c.name, FILES.c.media_type, FILES.c.kind, FILES.c.sha256)
        .add_columns(BLOBS.c.data)
        .join(BLOBS, BLOBS.c.id == FILES.c.blob_id)
        .where(FILES.c.id.in_(used))
        .order_by(FILES.c.id)
    )
    return [
        {
            "id": file_id,
            "name": name,
            "media_type": media_type,
            "kind": kind,
            "sha256": sha256,
            "data": base64.b64encode(bytes(data)).decode("ascii"),
        }
        for file_id, name, media_type, kind, sha256, data in rows
    ]


async def import_files(store: FileStore, owner: str, files: object) -> dict[str, StoredFile]:
    """An export's files kept for `owner`, by the id the export gave each; a 4xx naming
    the first that is refused, with those already kept deleted again."""
    if files is None:
        return {}
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise InvalidInput("files must be a list of files, as an export gives them")
    kept: dict[str, StoredFile] = {}
    try:
        for number, entry in enumerate(files):
            old, name, data = entry.get("id"), entry.get("name"), entry.get("data")
            if not (isinstance(old, str) and isinstance(name, str) and isinstance(data, str)):
                raise InvalidInput(f"files[{number}] needs its id, name and data")
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidInput(f"files[{number}].data is not base64") from None
            kept[old] = await store.upload(owner, name, raw)
    except BaseException:
        await forget(store, owner, kept)
        raise
    return kept


async def forget(store: FileStore, owner: str, kept: Mapping[str, StoredFile]) -> None:
    """Files an import kept, deleted again (no message uses them yet)."""
    for stored in kept.values():
        await store.delete(owner, stored.id)


def link_imported(
    session: Session, conversation_id: str, messages: object, kept: Mapping[str, StoredFile]
) -> None:
    """The imported messages given their files: each user row's `attachments` and
    `fit_attachments` under the new ids, and its `message_file` rows."""
    if not kept or not isinstance(messages, list):
        return
    connection = session.connection()
    rows: dict[int, int] = {
        seq: message_id
        for seq, message_id in connection.execute(
            select(MESSAGES.c.seq, MESSAGES.c.id).where(
                MESSAGES.c.conversation_id == conversation_id
            )
        )
    }
    for message in messages:
        attachments = message.get("attachments") if isinstance(message, dict) else None
        if not attachments or message.get("seq") not in rows:
            continue
        _link(connection, rows[message["seq"]], message, attachments, kept)


def _kept(kept: Mapping[str, StoredFile], old: object) -> StoredFile:
    stored = kept.get(old) if isinstance(old, str) else None
    if stored is None:
        raise InvalidInput(f"a message names a file the export does not hold: {old}")
    return stored


def _new_id(kept: Mapping[str, StoredFile], old: object) -> str:
    return _kept(kept, old).id


def _attachment(kept: Mapping[str, StoredFile], exported: object) -> dict[str, Any]:
    """An attachment as the row keeps it: the file's facts from the file itself, its
    counts as exported (whole numbers by model name, nothing else)."""
    if not isinstance(exported, dict):
        raise InvalidInput("a message's attachments are objects, as an export gives them")
    stored = _kept(kept, exported.get("id"))
    counts = exported.get("token_counts")
    if not isinstance(counts, dict) or not all(
        isinstance(k, str) and type(v) is int and 0 <= v < 2**31 for k, v in counts.items()
    ):
        raise InvalidInput(f"the token_counts of {stored.name} are not counts by model")
    return {
        "id": stored.id,
        "name": stored.name,
        "media_type": stored.media_type,
        "size": stored.size,
        "kind": stored.kind,
        "token_counts": counts,
    }


def _link(
    connection: Connection,
    message_id: int,
    message: dict[str, Any],
    attachments: list[Any],
    kept: Mapping[str, StoredFile],
) -> None:
    renamed = [_attachment(kept, a) for a in attachments]
    fit = message.get("fit") or {}
    carried = {
        "sent": [_new_id(kept, i) for i in fit.get("attachments_sent") or []],
        "left_out": [_new_id(kept, i) for i in fit.get("attachments_left_out") or []],
    }
    connection.execute(
        update(MESSAGES)
        .where(MESSAGES.c.id == message_id)
        .values(
            attachments=renamed,
            fit_attachments=carried if carried["sent"] or carried["left_out"] else None,
        )
    )
    connection.execute(
        insert(USES),
        [
            {"message_id": message_id, "position": n, "file_id": a["id"]}
            for n, a in enumerate(renamed)
        ],
    )


class Importer(Protocol):
    async def import_conversation(self, owner: str, data: object) -> Conversation: ...

    async def delete(self, owner: str, conversation_id: str) -> None: ...


async def with_files(
    store: FileStore, db: Database, importer: Importer, owner: str, data: dict[str, Any]
) -> Conversation:
    """`importer`'s conversation from an export, its files with it: all of it, or on any
    refusal nothing (the files and the conversation already kept are deleted again)."""
    kept = await import_files(store, owner, data.pop("files", None))
    try:
        conversation = await importer.import_conversation(owner, data)
    except BaseException:
        await forget(store, owner, kept)
        raise
    try:
        await db.write(link_imported, conversation.id, data.get("messages"), kept)
    except BaseException:
        await importer.delete(owner, conversation.id)
        await forget(store, owner, kept)
        raise
    return conversation
