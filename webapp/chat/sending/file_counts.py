"""A text file's and a PDF's tokens, counted with the serving model's own tokenizer as
typed text is (docs/design.md sections 7 and 12).

A file is counted as the model reads it: its text under its name, as `with_text_files`
puts it in the message. Each file is counted once per tokenizer and the count kept on its
row (`stored_file.token_counts`, by tokenizer id), so the composer's chip, the send and
the message's `attachments` all read the same figure, and a file sent again is never
counted again. Until a tokenizer has counted it (none is exact, the engine is down or
slow) a file is sized by the estimate, which errs high. Counting happens before the
send's transaction, never under its lock; a tokenizer that fails costs a count, never a
send.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from sqlalchemy import Connection, select, update

from webapp.chat.answering.answer import COUNT_TIMEOUT
from webapp.chat.files.models import StoredFile
from webapp.chat.files.store import FILES
from webapp.chat.stored.attachments import Attachment, attach
from webapp.db import Database
from webapp.llm.catalog.models import ModelSpec
from webapp.llm.manager import LLMManager
from webapp.llm.routing import RoutingError
from webapp.llm.tokenizers import Tokenizer

log = logging.getLogger(__name__)

WHOLE = 10**9
"""No limit on a file's text here: its size against the message was checked on upload."""


def as_read(stored: StoredFile) -> str:
    """The file's text as the model reads it: under its name, in its fence."""
    return attach("", Attachment(stored.name, stored.text or "-"), WHOLE)


def is_text(stored: StoredFile) -> bool:
    return stored.kind != "image" and stored.text is not None


def exact_ids(manager: LLMManager, models: Sequence[ModelSpec]) -> dict[str, str]:
    """The id of each model's tokenizer, by model name, for those that count exactly."""
    found = {}
    for model in models:
        tokenizer = manager.tokenizer_for(model)
        if tokenizer.exact:
            found[model.name] = tokenizer.id
    return found


async def count_files(
    db: Database, manager: LLMManager, models: Sequence[ModelSpec], files: Sequence[StoredFile]
) -> list[StoredFile]:
    """`files` with every text file and PDF counted by each exact tokenizer of `models`
    (those already counted are not counted again); the new counts are kept on the rows."""
    tokenizers: dict[str, Tokenizer] = {}
    for model in models:
        tokenizer = manager.tokenizer_for(model)
        if tokenizer.exact:
            tokenizers.setdefault(tokenizer.id, tokenizer)
    counted: dict[str, dict[str, int]] = {}
    for tokenizer in tokenizers.values():
        missing = [f for f in files if is_text(f) and tokenizer.id not in (f.token_counts or {})]
        if not missing:
            continue
        texts = [as_read(f) for f in missing]
        try:
            numbers = await asyncio.wait_for(tokenizer.count(texts), COUNT_TIMEOUT)
        except Exception as error:  # any failure of a tokenizer: the estimate sizes them
            log.warning("could not count files with %s: %s", tokenizer.id, error)
            continue
        for stored, number in zip(missing, numbers, strict=True):
            counted.setdefault(stored.id, {})[tokenizer.id] = number
    if not counted:
        return list(files)
    await db.write_core(_keep_counts, counted, quick=True)
    return [_with_counts(f, counted[f.id]) if f.id in counted else f for f in files]


def _with_counts(stored: StoredFile, new: Mapping[str, int]) -> StoredFile:
    return stored.model_copy(update={"token_counts": {**(stored.token_counts or {}), **new}})


def _keep_counts(connection: Connection, counted: Mapping[str, Mapping[str, int]]) -> None:
    """Each file's new counts added to those its row holds (another send may have counted
    it with another tokenizer meanwhile)."""
    rows = connection.execute(
        select(FILES.c.id, FILES.c.token_counts).where(FILES.c.id.in_(list(counted)))
    )
    for file_id, held in rows:
        merged = {**(held or {}), **counted[file_id]}
        connection.execute(update(FILES).where(FILES.c.id == file_id).values(token_counts=merged))


async def count_for(
    db: Database, manager: LLMManager, configuration: str, files: Sequence[StoredFile]
) -> list[StoredFile]:
    """`files` counted for every model of the configuration's route (as they are when
    the configuration routes nowhere: the send will say why)."""
    if not any(is_text(f) for f in files):
        return list(files)
    try:
        route = manager.route(configuration)
    except RoutingError:
        return list(files)
    return await count_files(db, manager, route.models, files)
