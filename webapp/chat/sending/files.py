"""The send's stage for the files a message carries (docs/design.md section 12).

Before the send's transaction, `read_attached` reads the caller's files the message
names (never another owner's), and `with_text_files` puts each text file's and PDF's
text in the message under its name, as the single text attachment always was: counted,
bounded, searched and exported like anything typed. Pictures go as parts of the
message: `seeing_route` refuses them for a model that cannot see and keeps only the
fallbacks that can; `newest_message` gives the message its picture parts (references to
the stored files, read and scaled only when the answer is sent) and its size by each
provider's rule; `with_history_pictures` gives earlier turns theirs, so a turn's
pictures go wherever the turn goes in the cut.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, or_, select
from sqlmodel import Session, col

from webapp.chat.files.models import MessageFile, StoredFile
from webapp.chat.files.parts import picture_parts
from webapp.chat.files.store import FILES, USES
from webapp.chat.stored.attachments import Attachment, attach
from webapp.chat.stored.models import Message
from webapp.db import Database
from webapp.errors import InvalidInput, NotFound
from webapp.llm.catalog import Catalog
from webapp.llm.catalog.models import ModelSpec
from webapp.llm.estimator import estimate_message, estimate_text
from webapp.llm.images import image_tokens
from webapp.llm.providers.base import Message as WireMessage
from webapp.llm.routing import Route, RoutingError, resolve
from webapp.llm.window import Transcript

VISION = "vision"


def check_file_ids(ids: object, most: int) -> list[str]:
    """The ids a message names, in order, each once; InvalidInput past `most`."""
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        raise InvalidInput("files is a list of file ids (from POST /api/files)")
    unique = list(dict.fromkeys(ids))
    if len(unique) > most:
        raise InvalidInput(f"a message may carry {most:,} files; this one names {len(unique):,}")
    return unique


def read_attached(connection: Connection, owner: str, ids: Sequence[str]) -> list[StoredFile]:
    """The caller's files by id, in the order named (without their bytes); NotFound
    naming the first that is not theirs or does not exist."""
    if not ids:
        return []
    rows = connection.execute(
        select(FILES).where(FILES.c.owner == owner, FILES.c.id.in_(list(ids)))
    ).mappings()
    found = {row["id"]: StoredFile.model_construct(**row) for row in rows}
    for file_id in ids:
        if file_id not in found:
            raise NotFound(f"no such file: {file_id}")
    return [found[file_id] for file_id in ids]


def with_text_files(typed: str, files: Sequence[StoredFile], limit: int) -> str:
    """The message as the model reads it: what was typed, then each text file and PDF
    under its name (within `limit` characters in all)."""
    content = typed
    for stored in files:
        if stored.kind != "image" and stored.text is not None:
            content = attach(content, Attachment(stored.name, stored.text), limit)
    return content


def _kind(catalog: Catalog, model: ModelSpec) -> str:
    provider = catalog.providers.get(model.provider)
    return provider.kind if provider is not None else "openai"


def picture_tokens(catalog: Catalog, model: ModelSpec, stored: StoredFile) -> int:
    return image_tokens(
        _kind(catalog, model), stored.width or 1, stored.height or 1, model.image_tokens
    )


def costliest(catalog: Catalog, models: Sequence[ModelSpec], width: int, height: int) -> int:
    """A picture's tokens by the costliest rule among `models` (OpenAI's without any):
    what a prompt is bounded with, whichever of them ends up reading it."""
    return max(
        (image_tokens(_kind(catalog, m), width, height, m.image_tokens) for m in models),
        default=image_tokens("openai", width, height),
    )


def file_tokens(
    catalog: Catalog,
    models: Sequence[ModelSpec],
    stored: StoredFile,
    exact: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """A file's tokens for each model that may read it: a picture by its provider's rule;
    text under its header as the model's tokenizer counted it (`exact`: each model's
    exact tokenizer id; the counts are the file's own, `file_counts`), else its estimate,
    which errs high."""
    if stored.kind == "image":
        return {m.name: picture_tokens(catalog, m, stored) for m in models}
    held = stored.token_counts or {}
    counted = {m.name: held.get((exact or {}).get(m.name, "")) for m in models}
    if all(c is not None for c in counted.values()):
        return {name: c for name, c in counted.items() if c is not None}
    estimate = estimate_text(attach("", Attachment(stored.name, stored.text or "-"), 10**9))
    return {name: estimate if c is None else c for name, c in counted.items()}


def seeing_route(catalog: Catalog, route: Route, files: Sequence[StoredFile]) -> Route:
    """The route a message with `files` may take (`route_for_pictures`)."""
    return route_for_pictures(catalog, route) if has_pictures(files) else route


def route_for_pictures(catalog: Catalog, route: Route) -> Route:
    """The route a prompt with pictures may take: only the models that see (its first
    model must; the fallbacks that cannot are passed over). Also the gateway's rule."""
    if VISION not in route.primary.capabilities:
        able = sorted(name for name in catalog.configurations if _sees(catalog, name))
        where = f"; configurations that can: {', '.join(able)}" if able else ""
        raise InvalidInput(
            f"{route.primary.name} cannot read pictures (it lacks the vision capability){where}"
        )
    return dataclasses.replace(
        route, models=tuple(m for m in route.models if VISION in m.capabilities)
    )


def _sees(catalog: Catalog, configuration: str) -> bool:
    try:
        return VISION in resolve(catalog, configuration).primary.capabilities
    except RoutingError:
        return False


def check_sizes(
    catalog: Catalog,
    route: Route,
    budget: int,
    files: Sequence[StoredFile],
    exact: Mapping[str, str] | None = None,
) -> None:
    """A file larger than the prompt a model can take alone is refused, naming its size
    against the window (counted by the model's tokenizer when it has counted the file)."""
    model = route.primary
    for stored in files:
        tokens = file_tokens(catalog, [model], stored, exact)[model.name]
        if tokens > budget:
            raise InvalidInput(
                f"{stored.name} is about {tokens:,} tokens; {model.name} reads "
                f"{model.window:,} at most, {budget:,} of them for a message and its history"
            )


def newest_message(
    catalog: Catalog, route: Route | RoutingError, text: str, files: Sequence[StoredFile]
) -> tuple[WireMessage, int]:
    """The new message as it is sent, and its estimate: its pictures as parts, each
    counted by the costliest rule of the models that may read it."""
    pictures = [f for f in files if f.kind == "image"]
    if not pictures:
        message: WireMessage = {"role": "user", "content": text}
        return message, estimate_message(message)
    models = route.models if isinstance(route, Route) else ()
    tokens = estimate_message({"role": "user", "content": text})
    for stored in pictures:
        tokens += costliest(catalog, models, stored.width or 1, stored.height or 1)
    return {"role": "user", "content": picture_parts(text, [f.id for f in pictures])}, tokens


_USES_BETWEEN = (
    select(USES.c.message_id, USES.c.file_id, FILES.c.kind, FILES.c.width, FILES.c.height)
    .join(FILES, FILES.c.id == USES.c.file_id)
    .join(Message, col(Message.id) == USES.c.message_id)
    .where(
        USES.c.message_id.between(bindparam("low"), bindparam("high")),
        col(Message.conversation_id) == bindparam("conversation"),
    )
    .order_by(USES.c.message_id, USES.c.position)
)
"""The files used by one conversation's messages in an id range, in each one's order."""


def with_history_pictures(
    connection: Connection,
    conversation_id: str,
    transcript: Transcript,
    newest: Sequence[StoredFile],
) -> Transcript:
    """The transcript with each earlier turn's pictures as parts of its message, the files
    of every message (by index) it carries, for the fit's record, and the size of each
    picture, which a message's exact count adds by the serving model's provider rule
    (`LLMManager.fit_for`)."""
    ids = transcript.ids or []
    messages = transcript.messages
    stored = [
        i for i, m in zip(ids, messages, strict=False) if i is not None and m.get("role") == "user"
    ]
    by_message: dict[int, list[tuple[str, str, tuple[int, int]]]] = {}
    if stored:
        # The range of the transcript's ids, not a list of them: one statement, compiled
        # once, where a list of a few hundred ids was compiled and bound anew at every
        # send (two thirds of `read_for_send`'s time in a profile of single sends).
        wanted = set(stored)
        bounds = {"low": min(stored), "high": max(stored), "conversation": conversation_id}
        uses = connection.execute(_USES_BETWEEN, bounds)
        for message_id, file_id, kind, width, height in uses:
            if message_id in wanted:
                size = (width or 1, height or 1)
                by_message.setdefault(message_id, []).append((file_id, kind, size))
    if not by_message and not newest:
        return transcript
    messages = list(messages)
    attachments: dict[int, tuple[str, ...]] = {}
    sizes: dict[int, list[tuple[int, int]]] = {}
    for index, message_id in enumerate(ids):
        files = by_message.get(message_id) if message_id is not None else None
        if not files:
            continue
        attachments[index] = tuple(file_id for file_id, _, _ in files)
        pictures = [file_id for file_id, kind, _ in files if kind == "image"]
        if pictures:
            text = str(messages[index].get("content") or "")
            messages[index] = {**messages[index], "content": picture_parts(text, pictures)}
            sizes[index] = [size for _, kind, size in files if kind == "image"]
    if newest:
        attachments[len(messages) - 1] = tuple(f.id for f in newest)
        if has_pictures(newest):
            sizes[len(messages) - 1] = [
                (f.width or 1, f.height or 1) for f in newest if f.kind == "image"
            ]
    return dataclasses.replace(
        transcript, messages=messages, attachments=attachments, pictures=sizes
    )


def file_links(message_id: int, files: Sequence[StoredFile]) -> list[dict[str, Any]]:
    """The message's `message_file` rows."""
    return [{"message_id": message_id, "position": n, "file_id": f.id} for n, f in enumerate(files)]


def attachment_dicts(
    catalog: Catalog,
    route: Route | RoutingError,
    files: Sequence[StoredFile],
    exact: Mapping[str, str] | None = None,
) -> list[dict[str, Any]] | None:
    """What the user row keeps of its files, as the message's JSON shows them."""
    if not files:
        return None
    models = route.models if isinstance(route, Route) else ()
    return [
        {
            "id": f.id,
            "name": f.name,
            "media_type": f.media_type,
            "size": f.size,
            "kind": f.kind,
            "token_counts": file_tokens(catalog, models, f, exact),
        }
        for f in files
    ]


LINKS = MessageFile.__table__  # type: ignore[attr-defined]


def _read_attached_in(session: Session, owner: str, ids: Sequence[str]) -> list[StoredFile]:
    return read_attached(session.connection(), owner, ids)


async def read_files(db: Database, owner: str, ids: object, most: int) -> list[StoredFile]:
    """The files a message names (`ids`, at most `most`), the caller's own, in order."""
    checked = check_file_ids(ids or [], most)
    return await db.read(_read_attached_in, owner, checked) if checked else []


def has_pictures(files: Sequence[StoredFile]) -> bool:
    return any(f.kind == "image" for f in files)


def with_left_out_files(
    connection: Connection, conversation_id: str, fit: dict[str, Any]
) -> dict[str, Any]:
    """The user row's fit columns with every file of the turns it left out, whether the fit
    dropped them or the loader never read them (far back in a long conversation): read
    from the stored spans, once per trimmed send."""
    spans = fit.get("fit_left_out") or []
    if not spans:
        return fit
    seqs = MESSAGES.c.seq
    within = [seqs.between(first, last) for first, last in spans]
    left_out = list(
        connection.execute(
            select(USES.c.file_id)
            .join(MESSAGES, MESSAGES.c.id == USES.c.message_id)
            .where(MESSAGES.c.conversation_id == conversation_id, or_(*within))
            .order_by(seqs, USES.c.position)
        ).scalars()
    )
    if not left_out:
        return fit
    carried = fit.get("fit_attachments") or {"sent": []}
    return {**fit, "fit_attachments": {"sent": carried["sent"], "left_out": left_out}}


MESSAGES = Message.__table__  # type: ignore[attr-defined]
