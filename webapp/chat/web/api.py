"""The JSON API for conversations (docs/design.md section 5), and the streamed send over SSE."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple
from weakref import WeakKeyDictionary

from litestar import Controller, MediaType, Request, Response, delete, get, patch, post, put
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter
from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.serialization import encode_json
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED
from litestar.types import ASGIApp

from webapp.accounts.preferences import preferred_configuration
from webapp.chat.answering.answer import TEXT_PACE, Channel, Event
from webapp.chat.files.transfer import export_files, with_files
from webapp.chat.files.web import Files
from webapp.chat.jobs import ChatJobs
from webapp.chat.send import Send
from webapp.chat.stored.attachments import with_file
from webapp.chat.stored.budget import ImportQuota
from webapp.chat.stored.chatgpt import is_chatgpt_export
from webapp.chat.stored.feedback import feedback_value
from webapp.chat.stored.history import Branch
from webapp.chat.stored.models import Conversation, Message
from webapp.chat.stored.organising import BulkAction, clean_tag, clean_tags
from webapp.chat.stored.presets import conversation_preset
from webapp.chat.stored.serialize import conversation_dict, message_dict, preview_dict
from webapp.chat.stored.summaries import export_summaries, summary_dict
from webapp.chat.stored.titles import clean_title
from webapp.chat.stored.transfer import (
    decode_export,
    export_batch,
    export_json,
    export_message,
    export_plan,
    markdown_batch,
    markdown_head,
    markdown_plan,
    markdown_turn,
)
from webapp.chat.web.deps import Chat
from webapp.errors import InvalidInput, NotFound
from webapp.limits import Places
from webapp.web.deps import Owner
from webapp.web.events import EventStream, frame
from webapp.web.params import RowId


@dataclass
class NewConversation:
    configuration: str | None = None
    title: str | None = None


@dataclass
class ConversationChanges:
    title: str | None = None
    configuration: str | None = None
    pinned: bool | None = None
    archived: bool | None = None
    tags: list[str] | None = None
    """The whole set of tags after the change (`[]` removes them all)."""
    preset: int | None = None
    """One of the caller's presets (its configuration comes with it), or null for the
    configuration alone; left out, unchanged (`_names_preset`)."""
    summarize: bool | None = None
    """Summaries of what the cut left out, on or off for this conversation."""


@dataclass
class SummaryEdit:
    content: str


@dataclass
class BulkChange:
    ids: list[str]
    action: BulkAction


@dataclass
class TextFile:
    name: str
    text: str


@dataclass
class NewMessage:
    content: str
    edit_of: int | None = None
    """A user message id: send `content` as an alternative to that turn (a new branch)."""
    attachment: TextFile | None = None
    """A text file whose text goes with `content`, under its name (as the composer's)."""
    files: list[str] | None = None
    """Ids of the caller's files (`POST /api/files`) the message carries, in order."""


@dataclass
class Preview:
    content: str
    files: list[str] | None = None
    """Ids of the caller's files the message would carry, counted as a send counts them."""


@dataclass
class Feedback:
    feedback: Literal["up", "down"] | None
    """`"up"`, `"down"`, or null to take the rating back."""


@dataclass
class ToolCallDecision:
    approve: bool
    """true: run the call; false: the model is told the user declined it."""


@dataclass
class MessageRef:
    message_id: int


ExportFormat = Annotated[Literal["json", "markdown"], QueryParameter(name="format")]
"""`?format=`: named apart from the builtin `format`."""


async def _names_preset(request: Request[Any, Any, Any]) -> bool:
    """Whether a conversation's changes name `preset` at all: null there means "no preset",
    where any other field's null means "unchanged"."""
    body = await request.json()
    return isinstance(body, dict) and "preset" in body


def wants_event_stream(request: Request[Any, Any, Any]) -> bool:
    return "text/event-stream" in request.headers.get("accept", "")


def sse_frame(event: Event) -> bytes:
    """One event as the stream carries it: its name, its id if any, its data as JSON."""
    return frame(json.dumps(event.data), event.name, event.id)


async def sse_events(channel: Channel) -> AsyncIterator[bytes]:
    """The answer's events, framed; whatever arrived since the last write goes in one,
    at most one write of text per `TEXT_PACE`."""
    async for batch in channel.batches(TEXT_PACE):
        yield b"".join(map(sse_frame, batch))


async def _answer(request: Request[Any, Any, Any], chat: ChatJobs, send: Send) -> ASGIApp:
    """A send's answer: streamed when the client asks for events, else waited for."""
    if wants_event_stream(request):
        return EventStream(sse_events(send.running.channel), status_code=HTTP_201_CREATED)
    user, answer = await chat.sender.settle(send)
    return ASGIResponse(
        body=encode_json({"user": message_dict(user), "assistant": message_dict(answer)}),
        status_code=HTTP_201_CREATED,
        media_type=MediaType.JSON,
    )


async def _with_branch(chat: ChatJobs, owner: str, conversation_id: str) -> dict[str, Any]:
    """A conversation with its active branch and that branch's alternatives."""
    conversation, messages = await chat.reader.history(owner, conversation_id)
    alternatives = await chat.reader.alternatives_of(conversation_id, messages)
    tags = (await chat.reader.tags_of([conversation_id])).get(conversation_id)
    summaries = await chat.reader.summaries(owner, conversation_id)
    return conversation_dict(conversation, messages, alternatives, tags=tags) | {
        "summarize": conversation.summarize,
        "summaries": [summary_dict(s) for s in summaries],
    }


@get("/api/search", tags=["conversations"])
async def search(
    chat: Chat, owner: Owner, q: FromQuery[str | None] = None, tag: FromQuery[str | None] = None
) -> dict[str, Any]:
    """The caller's own finished messages containing every word of `q` (each word a
    prefix), best first, in conversations carrying `tag` if given; `snippet` is HTML:
    escaped text, matches in `<mark>`; `kind` and `archived` say which conversation."""
    hits = await chat.reader.search(owner, q, tag)
    return {"results": [dataclasses.asdict(hit) for hit in hits]}


Listed = Annotated[Literal["true", "false", "all", ""], QueryParameter(name="archived")]
"""`?archived=`: only archived conversations, only the others (the default, also when
left empty), or all."""


async def _organised(chat: ChatJobs, conversations: list[Conversation]) -> list[dict[str, Any]]:
    """Conversations as the API lists them, each with its tags."""
    tags = await chat.reader.tags_of([c.id for c in conversations])
    return [conversation_dict(c, tags=tags.get(c.id)) for c in conversations]


_MESSAGES_MARK = "\x00messages\x00"
ENCODING_AT_ONCE = 2
"""Exports' batches a process reads and encodes at once: forty exports started together
took turns with every other request a batch each (the database's reader threads, then the
loop), so a request waited for forty batches (seconds); now for two at most, and the
exports wait for one another instead."""
_encoders: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = WeakKeyDictionary()


def _export_turn() -> asyncio.Semaphore:
    """A turn among this loop's exports to read and encode a batch (`ENCODING_AT_ONCE`)."""
    loop = asyncio.get_running_loop()
    return _encoders.get(loop) or _encoders.setdefault(loop, asyncio.Semaphore(ENCODING_AT_ONCE))


def _json_batch(rows: list[Message]) -> bytes:
    return b",".join(encode_json(export_message(row)) for row in rows)


def _markdown_batch(rows: list[Message]) -> str:
    return "\n".join(map(markdown_turn, rows))


async def _json_export(
    chat: ChatJobs, plan: tuple[Conversation, list[int]], place: ExitStack[bool | None]
) -> AsyncIterator[bytes]:
    """`export_json`'s document, as bytes, in pieces: its head, then the messages a batch
    at a time (`transfer.batch_ends`), up to the newest there was when the export began
    (so `active_seq` names a leaf of what is exported, whatever is sent meanwhile)."""
    with place:
        async for piece in _json_pieces(chat, *plan):
            yield piece


async def _markdown_export(
    chat: ChatJobs,
    shown: tuple[Conversation, Branch, list[tuple[int, int]]],
    place: ExitStack[bool | None],
) -> AsyncIterator[bytes]:
    """The Markdown export (`transfer.markdown_head`), a batch of the branch at a time
    (`transfer.markdown_plan`); the last piece is held back to end the text with one
    newline."""
    conversation, branch, batches = shown
    with place:
        pending = markdown_head(conversation)
        for start, count in batches:
            async with _export_turn():
                rows = await chat.db.read(markdown_batch, conversation.id, branch, start, count)
                text = _markdown_batch(rows)
            yield pending.encode()
            pending = "\n" + text
        yield (pending.rstrip() + "\n").encode()


async def _json_pieces(
    chat: ChatJobs, conversation: Conversation, ends: list[int]
) -> AsyncIterator[bytes]:
    files = await chat.db.read(export_files, conversation.id)
    preset = await chat.db.read(
        lambda session: conversation_preset(session.connection(), conversation)
    )
    named = preset.name if preset is not None else None
    summaries = await chat.db.read(export_summaries, conversation.id)
    head = {
        **export_json(conversation, [], named),
        "files": files,
        "summaries": summaries,
        "messages": _MESSAGES_MARK,
    }
    before, end = encode_json(head).split(encode_json(_MESSAGES_MARK), 1)
    yield before + b"["
    after, comma = 0, b""
    for last in ends:
        async with _export_turn():
            rows = await chat.db.read(export_batch, conversation.id, after, last)
            piece = _json_batch(rows)
        yield comma + piece
        comma, after = b",", last
    yield b"]" + end


async def _created(body: Callable[[], object]) -> ASGIResponse:
    """A 201 whose JSON is made and encoded on a thread (an import's may be megabytes)."""
    encoded = await asyncio.to_thread(lambda: encode_json(body()))
    return ASGIResponse(body=encoded, status_code=HTTP_201_CREATED, media_type=MediaType.JSON)


class TurnRef(NamedTuple):
    """A message the path names (`/{conversation_id}/messages/{message_id}`), and whose
    conversation it is in: in the order the chat jobs take them."""

    owner: str
    conversation_id: str
    message_id: int


Turn = NamedDependency[TurnRef]
"""`TurnController`'s `turn` dependency: the path's message, the caller's to act on."""


async def path_turn(owner: Owner, conversation_id: FromPath[str], message_id: RowId) -> TurnRef:
    return TurnRef(owner, conversation_id, message_id)


EXPORTS = Places()
"""The exports this process is writing, by owner (each worker caps its own)."""


def exporting(owner: str, cap: int) -> AbstractContextManager[None]:
    """A place among the owner's exports in flight, for as long as one is written to its
    client, or TooManyRequests past `cap` (0: no cap)."""
    return EXPORTS.hold(
        owner,
        cap,
        f"you already have {cap} exports on their way; "
        "wait for one to finish (or close it) and try again",
    )


def _attachment(conversation: Conversation, extension: str) -> str:
    return f'attachment; filename="{download_name(conversation.title)}.{extension}"'


def download_name(title: str) -> str:
    """A file name from a title: letters, digits, dashes; never empty, never a path."""
    return re.sub(r"[^\w-]+", "-", title, flags=re.ASCII).strip("-")[:80] or "conversation"


class ConversationController(Controller):
    path = "/api/conversations"
    tags = ("conversations",)

    @get("/")
    async def list_conversations(
        self,
        chat: Chat,
        owner: Owner,
        listed: Listed = "false",
        tag: FromQuery[str | None] = None,
    ) -> list[dict[str, Any]]:
        """Pinned first, then the most recently used; archived ones only with
        `?archived=true` (or `all`); `?tag=` only those carrying it."""
        archived = {"true": True, "false": False, "": False, "all": None}[listed]
        wanted = clean_tag(tag) if tag else None  # `?tag=` left empty: no filter
        return await _organised(
            chat, await chat.reader.conversations(owner, archived=archived, tag=wanted)
        )

    @post("/bulk", status_code=HTTP_200_OK)
    async def bulk_change(
        self, chat: Chat, owner: Owner, data: JSONBody[BulkChange]
    ) -> dict[str, Any]:
        """Archive, unarchive or delete several conversations: all of them, or none if
        any id is not the caller's (404)."""
        done = await chat.editor.bulk(owner, data.ids, data.action)
        return {"action": data.action, "count": done}

    @post("/", status_code=HTTP_201_CREATED)
    async def create_conversation(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        data: JSONBody[NewConversation | None] = None,
    ) -> dict[str, Any]:
        """Without a configuration, the caller's default preset, else their default
        configuration for new conversations (settings)."""
        data = data or NewConversation()
        configuration = data.configuration or preferred_configuration(
            request.user, chat.catalog.configurations
        )
        conversation = await chat.editor.create(
            owner, configuration, data.title, chosen=data.configuration is not None
        )
        return conversation_dict(conversation, [])

    @get("/{conversation_id:str}")
    async def read_conversation(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str]
    ) -> dict[str, Any]:
        return await _with_branch(chat, owner, conversation_id)

    @get("/{conversation_id:str}/export")
    async def export_conversation(
        self,
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
        export_format: ExportFormat = "json",
    ) -> Response[Any]:
        """The whole conversation: `json` (every message of every branch with its fit facts,
        for import) or `markdown` (the branch shown, to read). Served as a download named
        after the title; 429 past the caller's exports in flight (`WEBAPP_EXPORTS_PER_USER`)."""
        place = ExitStack()
        place.enter_context(exporting(owner, chat.settings.exports_per_user))
        try:
            if export_format == "markdown":
                await chat.reaper.reap_stale(conversation_id)
                shown = await chat.db.read(markdown_plan, owner, conversation_id)
                return Stream(  # the branch shown, read and sent a batch at a time
                    _markdown_export(chat, shown, place),
                    media_type="text/markdown; charset=utf-8",
                    headers={"Content-Disposition": _attachment(shown[0], "md")},
                )
            plan = await chat.db.read(export_plan, owner, conversation_id)
        except BaseException:
            place.close()
            raise
        return Stream(  # every branch, read and sent a batch at a time
            _json_export(chat, plan, place),
            media_type=MediaType.JSON,
            headers={"Content-Disposition": _attachment(plan[0], "json")},
        )

    @post("/import", status_code=HTTP_201_CREATED)
    async def import_conversation(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        files: Files,
    ) -> ASGIApp:
        """A new conversation from a JSON export (`GET .../export?format=json`), or from
        ChatGPT's `conversations.json` (a list): then `{imported: [ids], skipped: [{title,
        reason}]}`, every branch kept, the one last shown active. 429 past the caller's
        import quota (`WEBAPP_IMPORT_*`). The body is decoded and checked, and the answer
        encoded, off the event loop: 20,000 messages are a second of CPU."""
        raw = await request.body()
        await ImportQuota(chat.db, chat.settings).take(owner, len(raw))
        data = await asyncio.to_thread(decode_export, raw)
        if is_chatgpt_export(data):
            conversations, skipped = await chat.editor.import_chatgpt(owner, data)
            return await _created(
                lambda: {
                    "imported": [c.id for c in conversations],
                    "skipped": [dataclasses.asdict(s) for s in skipped],
                }
            )
        if not isinstance(data, dict):
            raise InvalidInput(
                "an import is this app's JSON export or ChatGPT's conversations.json"
            )
        conversation = await with_files(files, chat.db, chat.editor, owner, data)
        _, rows = await chat.reader.history_by_pages(owner, conversation.id)
        return await _created(lambda: conversation_dict(conversation, rows))

    @patch("/{conversation_id:str}")
    async def update_conversation(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
        data: JSONBody[ConversationChanges],
    ) -> dict[str, Any]:
        preset_given = await _names_preset(request)
        if not preset_given and all(value is None for value in dataclasses.astuple(data)):
            raise InvalidInput(
                "nothing to change: send a title, a configuration, a preset, pinned, archived, "
                "tags or summarize"
            )
        if data.configuration is not None and data.preset is not None:
            raise InvalidInput("send a configuration or a preset: a preset has its own")
        # All are checked before any is applied: a bad part changes nothing.
        title = clean_title(data.title) if data.title is not None else None
        tags = clean_tags(data.tags) if data.tags is not None else None
        if data.configuration is not None:
            chat.editor.check_configuration(data.configuration)
        await chat.reader.get(owner, conversation_id)  # another's: 404 before any change
        if data.configuration is not None:
            await chat.editor.set_configuration(owner, conversation_id, data.configuration)
        if preset_given:
            await chat.editor.set_preset(owner, conversation_id, data.preset)
        if title is not None:
            await chat.editor.rename(owner, conversation_id, title)
        if data.summarize is not None:
            await chat.editor.set_summarize(owner, conversation_id, data.summarize)
        conversation, now_tags = await chat.editor.organise(
            owner, conversation_id, pinned=data.pinned, archived=data.archived, tags=tags
        )
        return conversation_dict(conversation, tags=now_tags)

    @patch("/{conversation_id:str}/summaries/{summary_id:int}")
    async def edit_summary(
        self,
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
        summary_id: FromPath[int],
        data: JSONBody[SummaryEdit],
    ) -> dict[str, Any]:
        """Edit the active branch's newest summary: the next send carries the new text,
        which costs that send one cache miss (the request changes right after the head)."""
        if not 0 < summary_id < 2**63:
            raise NotFound("no such summary")
        content = data.content.strip()
        if not content:
            raise InvalidInput("a summary's content is text: send what the model should see")
        if len(content) > chat.settings.max_message_chars:
            raise InvalidInput(f"a summary is at most {chat.settings.max_message_chars} characters")
        summary = await chat.editor.edit_summary(owner, conversation_id, summary_id, content)
        return summary_dict(summary)

    @delete("/{conversation_id:str}", status_code=204)
    async def delete_conversation(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str]
    ) -> None:
        await chat.editor.delete(owner, conversation_id)

    @post("/{conversation_id:str}/messages", status_code=HTTP_201_CREATED)
    async def send_message(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
        data: JSONBody[NewMessage],
    ) -> ASGIApp:
        """Send a message. With `Accept: text/event-stream` the answer streams as events
        `fit`, `delta`, then `done` or `error`; otherwise this waits for the whole answer."""
        content = with_file(data.content, data.attachment, chat.settings.max_message_chars)
        send = await chat.sender.send(owner, conversation_id, content, data.edit_of, data.files)
        return await _answer(request, chat, send)

    @post("/{conversation_id:str}/branch", status_code=HTTP_200_OK)
    async def switch_branch(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str], data: JSONBody[MessageRef]
    ) -> dict[str, Any]:
        """Make the branch through a message active (down to its newest leaf): the next
        send continues it. Answers the conversation with that branch."""
        await chat.editor.branch(owner, conversation_id, data.message_id)
        return await _with_branch(chat, owner, conversation_id)

    @post("/{conversation_id:str}/fork", status_code=HTTP_201_CREATED)
    async def fork(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str], data: JSONBody[MessageRef]
    ) -> dict[str, Any]:
        """A new conversation holding the branch up to and including a message's turn."""
        fork = await chat.editor.fork(owner, conversation_id, data.message_id)
        return await _with_branch(chat, owner, fork.id)

    @post("/{conversation_id:str}/preview", status_code=HTTP_200_OK)
    async def preview_send(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str], data: JSONBody[Preview]
    ) -> dict[str, Any]:
        """The fit sending `content` now would make: what would be left out, stored nowhere."""
        row, fit = await chat.previewer.preview_fit(
            owner, conversation_id, data.content, data.files
        )
        return {**preview_dict(row), "turns_left": fit.turns_left}

    @post("/{conversation_id:str}/stop", status_code=HTTP_200_OK)
    async def stop_answer(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str]
    ) -> dict[str, Any]:
        answer = await chat.stopper.stop(owner, conversation_id)
        return {
            "stopped": answer is not None,
            "assistant": message_dict(answer) if answer else None,
        }

    @post("/{conversation_id:str}/tool-calls/{call_id:str}", status_code=HTTP_200_OK)
    async def decide_tool_call(
        self,
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
        call_id: FromPath[str],
        data: JSONBody[ToolCallDecision],
    ) -> dict[str, Any]:
        """Allow or deny a tool call waiting for the owner (its server has `approval =
        "always"`; the stream sent an `approval` event). 404 when no such call waits in
        the caller's conversation, 409 when it was decided already (or its wait ended);
        `forwarded` when another worker writes the answer (PostgreSQL)."""
        if not isinstance(data.approve, bool):
            raise InvalidInput("'approve' is true or false")
        how = await chat.approver.decide(owner, conversation_id, call_id, data.approve)
        return {"id": call_id, "approve": data.approve, how: True}


class TurnController(Controller):
    """What is done to one message of a conversation: answer its turn again or go on,
    pin it, rate it."""

    path = "/api/conversations/{conversation_id:str}/messages/{message_id:int}"
    tags = ("conversations",)
    dependencies = {"turn": Provide(path_turn)}  # noqa: RUF012

    @post("/regenerate", status_code=HTTP_201_CREATED)
    async def regenerate(self, request: Request[Any, Any, Any], chat: Chat, turn: Turn) -> ASGIApp:
        """A new answer to a user turn, as an alternative turn: 201 {user, assistant}, or
        streamed like a send. The earlier answer stays on record."""
        return await _answer(request, chat, await chat.sender.regenerate(*turn))

    @post("/pin", status_code=HTTP_200_OK)
    async def pin_turn(self, chat: Chat, turn: Turn) -> dict[str, Any]:
        """Pin a user turn: it is sent on every later send, after the head."""
        return message_dict(await chat.editor.pin(*turn, True))

    @delete("/pin", status_code=HTTP_200_OK)
    async def unpin_turn(self, chat: Chat, turn: Turn) -> dict[str, Any]:
        return message_dict(await chat.editor.pin(*turn, False))

    @post("/continue", status_code=HTTP_201_CREATED)
    async def continue_answer(
        self, request: Request[Any, Any, Any], chat: Chat, turn: Turn
    ) -> ASGIApp:
        """Continue an answer cut off by its length limit (`finish_reason` "length"): the
        model is asked to go on, bounded like any send, and its text is appended to that
        answer (the same id, no new turn); 201 {user, assistant} (the turn's question, the
        answer now longer), or streamed with `Accept: text/event-stream` (its deltas only
        the appended text)."""
        return await _answer(request, chat, await chat.sender.continue_answer(*turn))

    @put("/feedback", status_code=HTTP_200_OK)
    async def rate_answer(self, chat: Chat, turn: Turn, data: JSONBody[Feedback]) -> dict[str, Any]:
        """Thumbs up or down on an answer (null takes it back); the answer's JSON says it
        as `feedback`, and the admin review filters by it."""
        return message_dict(await chat.editor.feedback(*turn, feedback_value(data.feedback)))
