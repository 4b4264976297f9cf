"""`/embed/{name}`: the conversation pages for an anonymous visitor of a host site.

A visitor is the random id the CSRF layer gives every embed browser (a `Partitioned`
cookie where the browser keeps one in a cross-site frame, else the signed id the page
carries and htmx sends back): it owns one conversation per embed, so a reload keeps the
conversation while the browser keeps the id, and a visitor can only ever reach their own.
Reading creates nothing: the conversation is stored by the visitor's first send, in
the send's own transaction, and every send passes the embed's quotas in its admission
(see `quota.py`): a refused send stores nothing.
"""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.di import Provide
from litestar.params import FromPath

from webapp.accounts.service import digest
from webapp.chat.stored.models import Conversation
from webapp.chat.stored.titles import clean_title
from webapp.chat.web.deps import Chat
from webapp.chat.web.pages import ConversationPages, ConversationRef
from webapp.errors import NotFound
from webapp.llm.catalog import Catalog
from webapp.owners import EMBED_OWNER_PREFIX

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
    request: Request[Any, Any, Any], chat: Chat, embed_name: FromPath[str]
) -> ConversationRef:
    spec = chat.catalog.embeds.get(embed_name)
    if spec is None:
        raise NotFound("no such embed")
    owner = visitor_owner(spec.name, request.scope["state"]["anchor"])
    base = f"{EMBED_PATH}{spec.name}"
    address = request.client.host if request.client else ""
    existing = await chat.reader.conversations(owner, limit=1)
    if existing:
        return ConversationRef(owner, existing[0].id, base, spec, address=address)
    draft = Conversation(
        id="",
        owner=owner,
        configuration=spec.configuration,
        title=clean_title(spec.title or spec.name),
    )
    return ConversationRef(owner, "", base, spec, draft=draft, address=address)


class EmbedPages(ConversationPages):
    """The conversation pages for an embed's visitor (the quotas are the send's admission)."""

    path = "/embed/{embed_name:str}"
    dependencies = {"conversation": Provide(visitor_conversation)}  # noqa: RUF012
    page_template = "embed/page.html"
    opt = {"exclude_from_auth": True}  # noqa: RUF012
