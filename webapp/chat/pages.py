"""The chat pages: the conversation view, its partials, and the answer stream as HTML."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import Controller, Request, get, post
from litestar.response import Redirect, Response, Template
from litestar.types import ASGIApp
from sse_starlette import EventSourceResponse

from webapp.chat.live import follow_answer
from webapp.chat.service import ConversationService, Send
from webapp.chat.views import last_fit, message_views
from webapp.errors import InvalidInput
from webapp.llm.describe import configuration_dicts
from webapp.web.templates import render_fragment

PAGE_TURNS = 50


async def form_field(request: Request, name: str) -> str:
    form = await request.form()
    value = form.get(name)
    if not isinstance(value, str):
        raise InvalidInput(f"the form field {name!r} is missing")
    return value


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def go_to(request: Request, url: str) -> Response[Any]:
    """A redirect both htmx (HX-Redirect) and a plain form post (303) follow."""
    if is_htmx(request):
        return Response(content=b"", status_code=204, headers={"HX-Redirect": url})
    return Redirect(url, status_code=303)


class ChatPages(Controller):
    include_in_schema = False

    @get("/")
    async def home(self, request: Request, chat: ConversationService, owner: str) -> Redirect:
        conversations = await chat.list(owner, limit=1)
        conversation = conversations[0] if conversations else await chat.create(owner)
        return Redirect(f"/c/{conversation.id}", status_code=303)

    @post("/c/new")
    async def new_conversation(
        self, request: Request, chat: ConversationService, owner: str
    ) -> Response[Any]:
        form = await request.form()
        configuration = form.get("configuration")
        conversation = await chat.create(
            owner, configuration if isinstance(configuration, str) and configuration else None
        )
        return go_to(request, f"/c/{conversation.id}")

    @get("/c/{conversation_id:str}")
    async def conversation_page(
        self, chat: ConversationService, owner: str, conversation_id: str
    ) -> Template:
        conversation, rows, has_older = await chat.page(owner, conversation_id, turns=PAGE_TURNS)
        left_out = await chat.left_out_turns(conversation_id, rows)
        return Template(
            "chat/page.html",
            context={
                "conversation": conversation,
                "conversations": await chat.list(owner),
                "messages": message_views(rows, left_out),
                "has_older": has_older,
                "meter": last_fit(rows),
                "configurations": configuration_dicts(chat.manager.catalog),
                "streaming": any(r.status == "streaming" for r in rows),
            },
        )

    @get("/c/{conversation_id:str}/older")
    async def older_messages(
        self, chat: ConversationService, owner: str, conversation_id: str, before: int
    ) -> Template:
        conversation, rows, has_older = await chat.page(
            owner, conversation_id, before_seq=before, turns=PAGE_TURNS
        )
        left_out = await chat.left_out_turns(conversation_id, rows)
        return Template(
            "chat/_messages.html",
            context={
                "conversation": conversation,
                "messages": message_views(rows, left_out),
                "has_older": has_older,
            },
        )

    @post("/c/{conversation_id:str}/send")
    async def send(
        self, request: Request, chat: ConversationService, owner: str, conversation_id: str
    ) -> Template:
        content = await form_field(request, "content")
        return self._turn(await chat.send(owner, conversation_id, content))

    @post("/c/{conversation_id:str}/retry/{answer_id:int}")
    async def retry(
        self, chat: ConversationService, owner: str, conversation_id: str, answer_id: int
    ) -> Template:
        """Send a failed turn's message again, as a new turn; the failed one stays on record."""
        answer = await chat.message(owner, conversation_id, answer_id)
        if answer.role != "assistant":
            raise InvalidInput("retry names the answer that failed")
        original = await chat.user_row_of(answer)
        return self._turn(await chat.send(owner, conversation_id, original.content))

    @post("/c/{conversation_id:str}/stop", status_code=204)
    async def stop(self, chat: ConversationService, owner: str, conversation_id: str) -> None:
        await chat.stop(owner, conversation_id)

    @post("/c/{conversation_id:str}/rename")
    async def rename(
        self, request: Request, chat: ConversationService, owner: str, conversation_id: str
    ) -> Template:
        title = await form_field(request, "title")
        conversation = await chat.rename(owner, conversation_id, title)
        return Template("chat/_title.html", context={"conversation": conversation, "renamed": True})

    @post("/c/{conversation_id:str}/delete")
    async def delete(
        self, request: Request, chat: ConversationService, owner: str, conversation_id: str
    ) -> Response[Any]:
        await chat.delete(owner, conversation_id)
        return go_to(request, "/")

    @get("/c/{conversation_id:str}/answers/{answer_id:int}/stream")
    async def answer_stream(
        self, chat: ConversationService, owner: str, conversation_id: str, answer_id: int
    ) -> ASGIApp:
        """The answer as HTML snapshots over SSE; reconnecting simply resumes from now."""
        snapshots = follow_answer(chat, owner, conversation_id, answer_id)
        first = await anext(snapshots)  # checks ownership before the stream opens

        async def events() -> AsyncIterator[dict[str, Any]]:
            snapshot = first
            while True:
                yield {
                    "data": render_fragment(
                        "chat/_stream_update.html",
                        answer=message_views([snapshot.answer])[0],
                        user=message_views([snapshot.user])[0],
                        conversation_id=conversation_id,
                    ),
                    "id": str(len(snapshot.answer.content)),
                }
                if snapshot.final:
                    yield {"event": "done", "data": snapshot.answer.status}
                    return
                snapshot = await anext(snapshots)

        return EventSourceResponse(
            events(), ping=15, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        )

    @staticmethod
    def _turn(send: Send) -> Template:
        return Template(
            "chat/_turn.html",
            context={
                "conversation": send.conversation,
                "messages": message_views([send.user, send.answer]),
            },
        )
