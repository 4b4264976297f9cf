"""How the page shows files: the composer's chip for a file just uploaded, and a sent
message's files in the history (pictures as thumbnails, anything else as a link that
downloads). The bytes are always `GET /api/files/{id}`: served to their owner only, a
picture as itself and anything else as a download, never rendered inline as HTML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webapp.chat.jobs import ChatJobs
from webapp.chat.sending.file_counts import count_files, exact_ids
from webapp.chat.sending.files import file_tokens, read_files
from webapp.llm.routing import RoutingError, resolve


def size_words(size: int) -> str:
    """A file's size as people read it."""
    if size < 1024:
        return f"{size:,} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / 2**20:.1f} MB"


def file_url(file_id: str) -> str:
    return f"/api/files/{file_id}"


@dataclass(frozen=True, slots=True)
class FileView:
    """One file as the page shows it."""

    id: str
    name: str
    kind: str
    size: int
    tokens: int | None = None
    model: str = ""

    @property
    def url(self) -> str:
        return file_url(self.id)

    @property
    def size_words(self) -> str:
        return size_words(self.size)

    @property
    def is_image(self) -> bool:
        return self.kind == "image"


async def composer_chip(chat: ChatJobs, owner: str, configuration: str, file_id: str) -> FileView:
    """The owner's file `file_id` with its tokens for the configuration's serving model,
    a text file's counted by the model's tokenizer (`sending.file_counts`), else its
    estimate (none when the configuration no longer resolves); NotFound for anyone
    else's."""
    (stored,) = await read_files(chat.db, owner, [file_id], 1)
    try:
        model = resolve(chat.catalog, configuration).primary
    except RoutingError:
        return FileView(stored.id, stored.name, stored.kind, stored.size)
    (stored,) = await count_files(chat.db, chat.manager, [model], [stored])
    exact = exact_ids(chat.manager, [model])
    tokens = file_tokens(chat.catalog, [model], stored, exact)[model.name]
    return FileView(stored.id, stored.name, stored.kind, stored.size, tokens, model.name)


def sent_files(attachments: Sequence[dict[str, Any]] | None) -> tuple[FileView, ...]:
    """A stored message's files (its `attachments` column), in order."""
    return tuple(
        FileView(str(a["id"]), str(a["name"]), str(a["kind"]), int(a["size"]))
        for a in attachments or ()
    )
