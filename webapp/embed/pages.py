"""`/embed/{name}`: the conversation pages for an anonymous visitor of a host site.

A visitor is the random cookie the CSRF layer already gives every embed browser
(SameSite=None, so it works inside a cross-site iframe): it owns one
conversation per embed, so a reload keeps the conversation, and a visitor can
only ever reach their own.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import Provide

from webapp.accounts.service import digest
from webapp.chat.pages import ConversationPages, ConversationRef
from webapp.chat.service import EMBED_OWNER_PREFIX, ConversationService
from webapp.errors import NotFound
from webapp.llm.catalog import Catalog

EMBED_PATH = "/embed/"


def visitor_owner(embed_name: str, visitor: str) -> str:
    return f"{EMBED_OWNER_PREFIX}{embed_name}:{digest(visitor)[:40]}"


def embed_name_of(path: str) -> str | None:
    if not path.startswith(EMBED_PATH):
        return None
    return path[len(EMBED_PATH) :].split("/", 1)[0] or None


def frame_ancestors(catalog: Catalog, path: str) -> tuple[str, ...] | None:
    """The origins that may frame this path: an embed's allowed origins, else none."""
    name = embed_name_of(path)
    spec = catalog.embeds.get(name) if name else None
    return spec.allowed_origins if spec else None


async def visitor_conversation(
    request: Request[Any, Any, Any], chat: ConversationService, embed_name: str
) -> ConversationRef:
    spec = chat.manager.catalog.embeds.get(embed_name)
    if spec is None:
        raise NotFound("no such embed")
    owner = visitor_owner(spec.name, request.scope["state"]["anchor"])
    existing = await chat.list(owner, limit=1)
    conversation = (
        existing[0]
        if existing
        else await chat.create(owner, spec.configuration, spec.title or spec.name)
    )
    return ConversationRef(owner, conversation.id, f"{EMBED_PATH}{spec.name}", spec)


class EmbedPages(ConversationPages):
    path = "/embed/{embed_name:str}"
    dependencies = {"conversation": Provide(visitor_conversation)}  # noqa: RUF012
    page_template = "embed/page.html"
    opt = {"exclude_from_auth": True}  # noqa: RUF012
