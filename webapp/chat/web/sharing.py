"""Read-only links to a conversation: the JSON API (`POST .../share`, `GET /api/shares`,
`DELETE /api/shares/{id}`), the shared page `/s/{token}` served without sign-in, and the
owner's pages to make and revoke links."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Controller, Request, delete, get, post
from litestar.params import FromPath, JSONBody
from litestar.response import Redirect, Template
from litestar.status_codes import HTTP_201_CREATED
from markupsafe import Markup, escape

from webapp.chat.sharing import Opened, SharedLinks
from webapp.chat.stored.attachments import attachment_html, split_attachment
from webapp.chat.stored.serialize import _iso
from webapp.chat.stored.shares import Share, share_url
from webapp.chat.web.deps import Chat
from webapp.chat.web.views import MessageView, message_views
from webapp.web.deps import Owner
from webapp.web.markdown import render_markdown

NOINDEX = {"X-Robots-Tag": "noindex, nofollow"}
"""A shared page is for whoever has the link, never for a search engine."""


@dataclass
class NewShare:
    show_owner: bool = False
    """Say who shared it (the owner's username); left out by default."""
    with_attachments: bool = False
    """Show attached files' text; by default the page says only that a file was attached."""


def share_dict(share: Share, token: str | None = None) -> dict[str, Any]:
    """A link as the API says it; `url` only when it was just made (its token is kept
    nowhere, so it cannot be shown again)."""
    data: dict[str, Any] = {
        "id": share.id,
        "conversation_id": share.conversation_id,
        "title": share.title,
        "created_at": _iso(share.created_at),
        "show_owner": share.author is not None,
        "with_attachments": share.with_attachments,
    }
    if token is not None:
        data["url"] = share_url(token)
    return data


def author_of(request: Request[Any, Any, Any], show: bool) -> str | None:
    user = request.scope.get("user")
    return getattr(user, "username", None) if show else None


@dataclass(frozen=True, slots=True)
class SharedMessage:
    """One message of a shared page: who said it, its text, and the notes the owner's
    page shows beside it (what the send left out, an answer that failed or stopped)."""

    speaker: str
    html: Markup
    cut: str | None
    status: str | None


def _user_html(view: MessageView, with_attachments: bool) -> Markup:
    content = view.row.content
    if with_attachments:
        return attachment_html(content) or escape(content)
    typed, attachment, _, _ = split_attachment(content)
    if attachment is None:
        return escape(content)
    note = Markup('<span class="hint">A file was attached; it is not shared.</span>')
    return escape(typed.rstrip()) + (Markup("<br>") if typed.strip() else Markup("")) + note


WITHHELD = "[an attached file, not shared]"
QUOTE_MIN = 16
"""Characters of a file an answer must quote verbatim for the quote to be withheld."""


def _answer_html(view: MessageView, withheld: list[str]) -> Markup:
    """An answer; a file not shared that it quotes whole is left out of it."""
    content = view.row.content
    quoted = [text for text in withheld if text in content]
    if not quoted:
        return view.html
    for text in quoted:
        content = content.replace(text, WITHHELD)
    return Markup(render_markdown(content))


def shared_messages(opened: Opened) -> list[SharedMessage]:
    views = message_views(opened.rows)
    withheld = (
        []
        if opened.share.with_attachments
        else [
            attachment.text.strip()
            for view in views
            if view.is_user and (attachment := split_attachment(view.row.content)[1]) is not None
            if len(attachment.text.strip()) >= QUOTE_MIN
        ]
    )
    return [
        SharedMessage(
            speaker=view.speaker,
            html=(
                _user_html(view, opened.share.with_attachments)
                if view.is_user
                else _answer_html(view, withheld)
            ),
            cut=view.trim_label,
            status=view.status_label,
        )
        for view in views
    ]


class ShareApi(Controller):
    path = "/api"
    tags = ("sharing",)

    @post("/conversations/{conversation_id:str}/share", status_code=HTTP_201_CREATED)
    async def share(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
        data: JSONBody[NewShare | None] = None,
    ) -> dict[str, Any]:
        """A read-only link to the conversation's active branch as it is now: `url` is
        shown only in this answer. The owner's name only with `show_owner`, attached
        files' text only with `with_attachments`."""
        data = data or NewShare()
        share, token = await SharedLinks(chat.db).create(
            owner,
            conversation_id,
            author=author_of(request, data.show_owner),
            with_attachments=data.with_attachments,
        )
        return share_dict(share, token)

    @get("/shares")
    async def list_shares(self, chat: Chat, owner: Owner) -> list[dict[str, Any]]:
        return [share_dict(share) for share in await SharedLinks(chat.db).owned(owner)]

    @delete("/shares/{share_id:str}", status_code=204)
    async def revoke_share(self, chat: Chat, owner: Owner, share_id: FromPath[str]) -> None:
        """The link answers 404 from now on."""
        await SharedLinks(chat.db).revoke(owner, share_id)


class SharePages(Controller):
    include_in_schema = False

    @get("/s/{token:str}", exclude_from_auth=True, response_headers=NOINDEX)
    async def shared_page(self, chat: Chat, token: FromPath[str]) -> Template:
        """Anyone with the link reads the conversation as it was shared; nothing more."""
        opened = await SharedLinks(chat.db).open(token)
        return Template(
            "chat/shared.html",
            context={"share": opened.share, "messages": shared_messages(opened)},
            headers=NOINDEX,
        )

    @get("/c/{conversation_id:str}/share")
    async def share_page(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str]
    ) -> Template:
        """The owner's page for one conversation's links: make one, revoke them."""
        return await _owner_page(chat, owner, conversation_id)

    @post("/c/{conversation_id:str}/share")
    async def make_link(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
    ) -> Template:
        form = await request.form()
        _, token = await SharedLinks(chat.db).create(
            owner,
            conversation_id,
            author=author_of(request, form.get("show_owner") == "on"),
            with_attachments=form.get("with_attachments") == "on",
        )
        return await _owner_page(chat, owner, conversation_id, new_url=share_url(token))

    @post("/shares/{share_id:str}/revoke")
    async def revoke(
        self, request: Request[Any, Any, Any], chat: Chat, owner: Owner, share_id: FromPath[str]
    ) -> Redirect:
        """Back to where it was revoked from: the conversation's links or the settings."""
        links = SharedLinks(chat.db)
        conversation_ids = {s.id: s.conversation_id for s in await links.owned(owner)}
        await links.revoke(owner, share_id)
        form = await request.form()
        back = (
            f"/c/{conversation_ids[share_id]}/share"
            if form.get("back") == "conversation"
            else "/settings"
        )
        return Redirect(back, status_code=303)

    @get("/settings/shares")
    async def settings_list(self, chat: Chat, owner: Owner) -> Template:
        """The settings page's list of every link the owner has made."""
        return Template(
            "chat/_share_list.html",
            context={"shares": await SharedLinks(chat.db).owned(owner), "back": "settings"},
        )


async def _owner_page(
    chat: Chat, owner: str, conversation_id: str, *, new_url: str | None = None
) -> Template:
    conversation = await chat.reader.get(owner, conversation_id)
    shares = [
        s for s in await SharedLinks(chat.db).owned(owner) if s.conversation_id == conversation_id
    ]
    return Template(
        "chat/share.html",
        context={
            "conversation": conversation,
            "shares": shares,
            "new_url": new_url,
            "back": "conversation",
        },
    )
