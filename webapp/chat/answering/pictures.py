"""The pictures of a send put in its messages as it goes out: each stored picture a
message's part names (`files.parts`) read, scaled down to what the first model's provider
reads at most (in a reader process: `files.isolation`) and sent as a data URL. Done once
per answer, after the send's transaction, so no picture's bytes are read under the lock."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import select
from sqlmodel import Session

from webapp.chat.files.inspect import as_sent
from webapp.chat.files.isolation import in_child
from webapp.chat.files.parts import referenced, with_urls
from webapp.chat.files.store import BLOBS, FILES
from webapp.db import Database
from webapp.llm.images import SENT_LONG_EDGE
from webapp.llm.manager import LLMManager, Plan
from webapp.llm.providers.base import Message


def _pictures(session: Session, ids: Sequence[str]) -> list[tuple[str, str, str, bytes]]:
    rows = session.connection().execute(
        select(FILES.c.id, FILES.c.name, FILES.c.media_type, BLOBS.c.data)
        .join(BLOBS, BLOBS.c.id == FILES.c.blob_id)
        .where(FILES.c.id.in_(list(ids)), FILES.c.kind == "image")
    )
    return [(file_id, name, media_type, bytes(data)) for file_id, name, media_type, data in rows]


def _swapped(messages: Sequence[Message], urls: dict[str, str]) -> list[Message]:
    return [
        {**m, "content": with_urls(m.get("content"), urls)} if referenced(m.get("content")) else m
        for m in messages
    ]


async def with_pictures(db: Database, manager: LLMManager, planned: Plan, seconds: float) -> Plan:
    """The plan with its pictures in place (the plan itself when it names none)."""
    ids = list(
        dict.fromkeys(i for m in planned.transcript.messages for i in referenced(m.get("content")))
    )
    if not ids:
        return planned
    provider = manager.catalog.providers.get(planned.route.primary.provider)
    long_edge = SENT_LONG_EDGE.get(provider.kind if provider else "openai", 2048)
    urls = {}
    for file_id, name, media_type, data in await db.read(_pictures, ids):
        urls[file_id] = await in_child(name, seconds, as_sent, data, media_type, long_edge)
    transcript = planned.transcript
    transcript = dataclasses.replace(transcript, messages=_swapped(transcript.messages, urls))
    fit = dataclasses.replace(planned.fit, messages=_swapped(planned.fit.messages, urls))
    return dataclasses.replace(planned, transcript=transcript, fit=fit)
