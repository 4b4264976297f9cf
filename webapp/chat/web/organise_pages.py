"""The pages that organise conversations without the API: the list to select several
from and archive, unarchive or delete them (`/organise`), and one conversation's pin,
archive and tags (`/c/{id}/organise`). Plain forms: each change is a POST answered with
a redirect back, so a reload never repeats it."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlencode

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from webapp.chat.stored.organising import BulkAction, clean_tag, clean_tags
from webapp.chat.web.deps import Chat
from webapp.errors import InvalidInput
from webapp.web.deps import Owner

Shown = Annotated[Literal["active", "archived"], QueryParameter(name="show")]
"""`?show=`: the conversations in the sidebar, or the archived ones."""
BULK_ACTIONS: dict[str, BulkAction] = {action: action for action in get_args(BulkAction)}
OneChange = Literal["pin", "unpin", "archive", "unarchive", "add_tag", "remove_tag"]


def organise_url(show: str, tag: str) -> str:
    query = {key: value for key, value in (("show", show), ("tag", tag)) if value}
    return "/organise" + ("?" + urlencode(query) if query else "")


class OrganisePages(Controller):
    include_in_schema = False

    @get("/organise")
    async def organise(
        self, chat: Chat, owner: Owner, shown: Shown = "active", tag: FromQuery[str] = ""
    ) -> Template:
        """Every conversation shown (or archived), with a box to select each."""
        wanted = clean_tag(tag) if tag else None
        conversations = await chat.reader.conversations(
            owner, limit=1000, archived=shown == "archived", tag=wanted
        )
        return Template(
            "chat/organise.html",
            context={
                "conversations": conversations,
                "tags": await chat.reader.tags_of([c.id for c in conversations]),
                "owner_tags": await chat.reader.owner_tags(owner),
                "show": shown,
                "tag": wanted or "",
            },
        )

    @post("/organise/bulk")
    async def bulk(
        self, request: Request[Any, Any, Any], chat: Chat, owner: Owner
    ) -> Response[Any]:
        """Archive, unarchive or delete the conversations selected (a delete is confirmed
        on a page of its own first); back to the list as it was filtered."""
        form = await request.form()
        action = BULK_ACTIONS.get(str(form.get("action")))
        if action is None:
            raise InvalidInput("choose archive, unarchive or delete")
        ids = [value for value in form.getall("ids") if isinstance(value, str)]
        if not ids:
            raise InvalidInput("select at least one conversation first")
        show, tag = form.get("show"), form.get("tag")
        back = organise_url(show if show == "archived" else "", tag if isinstance(tag, str) else "")
        if action == "delete" and form.get("confirmed") != "yes":
            # Asked once more, by name: deleting cannot be undone.
            chosen = [await chat.reader.get(owner, cid) for cid in dict.fromkeys(ids)]
            return Template(
                "chat/organise_confirm.html",
                context={"conversations": chosen, "show": show, "tag": tag, "back": back},
            )
        await chat.editor.bulk(owner, ids, action)
        return Redirect(back, status_code=303)

    @get("/c/{conversation_id:str}/organise")
    async def organise_one(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str]
    ) -> Template:
        """One conversation's pin, archive and tags, and the way to its shared links."""
        conversation = await chat.reader.get(owner, conversation_id)
        tags = (await chat.reader.tags_of([conversation_id])).get(conversation_id, [])
        return Template(
            "chat/organise_one.html", context={"conversation": conversation, "tags": tags}
        )

    @post("/c/{conversation_id:str}/organise")
    async def change_one(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
    ) -> Redirect:
        form = await request.form()
        change = form.get("change")
        if change not in get_args(OneChange):
            raise InvalidInput("choose pin, unpin, archive, unarchive, add_tag or remove_tag")
        if change in ("pin", "unpin"):
            await chat.editor.organise(owner, conversation_id, pinned=change == "pin")
        elif change in ("archive", "unarchive"):
            await chat.editor.organise(owner, conversation_id, archived=change == "archive")
        else:
            await chat.reader.get(owner, conversation_id)  # another's: 404, nothing read
            now = (await chat.reader.tags_of([conversation_id])).get(conversation_id, [])
            tag = clean_tag(form.get("tag"))
            tags = [*now, tag] if change == "add_tag" else [t for t in now if t != tag]
            await chat.editor.organise(owner, conversation_id, tags=clean_tags(tags))
        return Redirect(f"/c/{conversation_id}/organise", status_code=303)
