"""The chat pages: a conversation, its partials, and the answer stream as HTML.

The same handlers serve a signed-in user's conversation (`/c/{id}/...`) and an
embed visitor's (`/embed/{name}/...`); only how the conversation is found
differs, which a `conversation` dependency decides per controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Response, Template
from litestar.types import ASGIApp

from webapp.accounts.preferences import preferred_configuration
from webapp.chat.files.transfer import with_files
from webapp.chat.files.web import Files
from webapp.chat.jobs import ChatJobs
from webapp.chat.send import Send
from webapp.chat.stored.attachments import Attachment, attach, clean_name, decode_text
from webapp.chat.stored.branches import Alternatives
from webapp.chat.stored.budget import ImportQuota
from webapp.chat.stored.chatgpt import is_chatgpt_export
from webapp.chat.stored.feedback import feedback_value
from webapp.chat.stored.models import RETRYABLE, Conversation, Message, Role, Summary
from webapp.chat.stored.organising import clean_tag
from webapp.chat.stored.transfer import decode_export
from webapp.chat.web.deps import Chat, Notices
from webapp.chat.web.file_views import FileView, composer_chip
from webapp.chat.web.live import WATCHERS, Snapshot, answer_to_follow, snapshots_of
from webapp.chat.web.page_stream import LIVE_PAGES, PageCursor
from webapp.chat.web.views import (
    Alternative,
    Meter,
    answer_view,
    day_label,
    group_by_day,
    last_fit,
    message_views,
)
from webapp.errors import Conflict, FilesOff, InvalidInput, NotFound
from webapp.llm.catalog import EmbedSpec
from webapp.llm.describe import configuration_dicts
from webapp.stored import id_of
from webapp.timeutil import utcnow
from webapp.web.deps import Owner
from webapp.web.events import EventStream
from webapp.web.markdown import prerendered, prerendered_view
from webapp.web.params import OptionalRowIdQuery, RowId, Seq
from webapp.web.templates import render_fragment

PAGE_TURNS = 50
MAX_IMPORT_BYTES = 20 * 2**20
SIDEBAR_PAGE = 200


@dataclass(frozen=True, slots=True)
class ConversationRef:
    """Whose conversation a page request is about, and where its URLs start."""

    owner: str
    id: str
    base: str
    embed: EmbedSpec | None = None
    draft: Conversation | None = None
    """A conversation not stored yet (an embed visitor's before the first send): shown
    empty, stored by the first send. Reading a page never creates a row."""
    address: str = ""
    """The client's address, for the embed's quotas (counted by the send's admission)."""

    @property
    def internals(self) -> bool:
        """Whether the page shows token counts and model and configuration names."""
        return self.embed is None or self.embed.show_internals


def takes_files(conversation: ConversationRef, kind: str | None = None) -> None:
    """A 403 for files through an embed whose entry lets visitors attach none (or none of
    `kind`)."""
    if conversation.embed is None:
        return
    kinds = conversation.embed.file_kinds
    if not kinds or (kind is not None and kind not in kinds):
        raise FilesOff(
            "this chat takes no files" if not kinds else f"this chat takes no {kind} files"
        )


async def form_field(request: Request[Any, Any, Any], name: str, *, required: bool = True) -> str:
    """A form field's text; one left out (or sent as a file) is refused, or is "" where
    it is optional."""
    form = await request.form()
    value = form.get(name)
    if isinstance(value, str):
        return value
    if required:
        raise InvalidInput(f"the form field {name!r} is missing")
    return ""


async def message_field(
    request: Request[Any, Any, Any], limit: int, conversation: ConversationRef | None = None
) -> str:
    """The composer's message: what was typed, and the text file attached to it, if any
    (`webapp.chat.stored.attachments`), refused with a reason before anything is stored
    (403 through an embed whose entry takes no text files)."""
    form = await request.form()
    typed = form.get("content")
    if not isinstance(typed, str):
        raise InvalidInput("the form field 'content' is missing")
    typed = typed.replace("\r\n", "\n")  # a multipart form sends a textarea's lines so
    upload = form.get("attachment")
    if not isinstance(upload, UploadFile) or not upload.filename:
        return typed
    if conversation is not None:
        takes_files(conversation, "text")
    name = clean_name(upload.filename)
    data = await upload.read(4 * limit + 1)  # UTF-8 takes at most 4 bytes a character
    return attach(typed, Attachment(name, decode_text(name, data)), limit)


async def file_ids(request: Request[Any, Any, Any]) -> list[str]:
    """The ids of the files the composer's chips carry (`files`, one field each, in order):
    the send and the meter count them as the JSON API does."""
    form = await request.form()
    return [value for value in form.getall("files", []) if isinstance(value, str) and value]


def is_htmx(request: Request[Any, Any, Any]) -> bool:
    return request.headers.get("hx-request") == "true"


def go_to(request: Request[Any, Any, Any], url: str) -> Response[Any]:
    """A redirect both htmx (HX-Redirect) and a plain form post (303) follow."""
    if is_htmx(request):
        return Response(content=b"", status_code=204, headers={"HX-Redirect": url})
    return Redirect(url, status_code=303)


FoundConversation = NamedDependency[ConversationRef]
"""The controller's `conversation` dependency: the page's conversation, found its way."""


async def user_conversation(owner: Owner, conversation_id: FromPath[str]) -> ConversationRef:
    return ConversationRef(owner=owner, id=conversation_id, base=f"/c/{conversation_id}")


class ConversationPages(Controller):
    """A conversation's page and everything it does: send, retry, stop, stream, scroll back."""

    path = "/c/{conversation_id:str}"
    include_in_schema = False
    dependencies = {"conversation": Provide(user_conversation)}  # noqa: RUF012
    page_template = "chat/page.html"

    @get("/")
    async def conversation_page(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
        at: OptionalRowIdQuery = None,
    ) -> Template:
        """The newest turns; with `at` (a search hit's message), back to that one too."""
        rows: list[Message]
        if conversation.draft is not None:
            row, rows, has_older = conversation.draft, [], False
        else:
            row, rows, has_older = await chat.reader.page(
                conversation.owner, conversation.id, turns=PAGE_TURNS, through_message=at
            )
        alternatives = await chat.reader.alternatives_of(conversation.id, rows) if rows else {}
        context = await _pane(conversation, row, rows, alternatives, has_older)
        context["embed"] = conversation.embed
        context["meter"] = last_fit(rows)
        context["streaming"] = any(r.status == "streaming" for r in rows)
        if conversation.embed is None:
            context.update(await sidebar(chat, conversation.owner, 0, conversation.id))
            context["owner_tags"] = await chat.reader.owner_tags(conversation.owner)
            context["configurations"] = configuration_dicts(chat.catalog)
            context["presets"] = await chat.presets.list(conversation.owner)
            context["default_configuration"] = default_configuration(request, chat)
            context["summary_panel"] = (
                await summary_panel(chat, conversation.owner, row)
                if conversation.draft is None
                else None
            )
        return Template(self.page_template, context=context)

    @get("/older")
    async def older_messages(
        self, chat: Chat, conversation: FoundConversation, before: Seq
    ) -> Template:
        return await _branch_page(chat, conversation, before)

    @post("/send")
    async def send(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
    ) -> Template:
        content = await message_field(request, chat.settings.max_message_chars, conversation)
        files = await file_ids(request)
        if files:
            takes_files(conversation)
        send = await chat.sender.send(
            conversation.owner,
            conversation.id,
            content,
            files=files,
            address=conversation.address,
            draft=conversation.draft,
        )
        return _turn(send, conversation)

    @post("/continue/{answer_id:int}")
    async def continue_answer(
        self, chat: Chat, conversation: FoundConversation, answer_id: RowId
    ) -> Template:
        """Continue on an answer cut off by its length limit: the same answer, streaming
        again in its place with the continuation appended."""
        send = await chat.sender.continue_answer(
            conversation.owner, conversation.id, answer_id, address=conversation.address
        )
        return _turn(send, conversation)

    @post("/retry/{answer_id:int}")
    async def retry(
        self, chat: Chat, conversation: FoundConversation, answer_id: RowId
    ) -> Template:
        """A failed answer's Retry: a regenerate of its turn, shown in its place (the failed
        answer stays on record as an alternative), so no duplicate turn, no stale Retry."""
        answer = await chat.reader.message(conversation.owner, conversation.id, answer_id)
        if answer.role != Role.ASSISTANT:
            raise InvalidInput("retry names the answer that failed")
        if answer.status not in RETRYABLE:
            raise Conflict("only a failed or interrupted answer can be sent again")
        return await _regenerate(chat, conversation, answer_id)

    @post("/regenerate/{message_id:int}")
    async def regenerate(
        self, chat: Chat, conversation: FoundConversation, message_id: RowId
    ) -> Template:
        """A new answer to a turn (named by its user message or its answer): the branch
        is shown again, with the new turn streaming where the old one was."""
        return await _regenerate(chat, conversation, message_id)

    @post("/edit/{message_id:int}")
    async def edit(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
        message_id: RowId,
    ) -> Template:
        """Send an edited user message as an alternative to its turn."""
        content = await form_field(request, "content")
        await chat.sender.send(
            conversation.owner,
            conversation.id,
            content,
            edit_of=message_id,
            address=conversation.address,
        )
        return await _branch_page(chat, conversation)

    @post("/branch/{message_id:int}")
    async def switch_branch(
        self, chat: Chat, conversation: FoundConversation, message_id: RowId
    ) -> Template:
        """Show another alternative of a turn: the branch through that message."""
        await chat.editor.branch(conversation.owner, conversation.id, message_id)
        return await _branch_page(chat, conversation)

    @post("/fork/{message_id:int}")
    async def fork(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
        message_id: RowId,
    ) -> Response[Any]:
        """Copy the branch up to this message's turn into a new conversation and open it
        (not for embeds: a visitor has one conversation)."""
        if conversation.embed is not None:
            raise InvalidInput("an embedded chat has one conversation")
        fork = await chat.editor.fork(conversation.owner, conversation.id, message_id)
        return go_to(request, f"/c/{fork.id}")

    @post("/preview")
    async def preview(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
    ) -> Template:
        """The meter for what is being typed: what the next send would leave out, with
        a remedy when one exists. An empty box shows the last send's meter again."""
        content = await message_field(request, chat.settings.max_message_chars, conversation)
        files = await file_ids(request)
        if not content.strip() and not files:
            _, rows, _ = await chat.reader.page(conversation.owner, conversation.id, turns=1)
            meter = last_fit(rows)
        else:
            meter = await next_send_meter(chat, conversation, content, files)
        return Template("chat/_meter.html", context=_context(conversation, meter=meter))

    @get("/files/{file_id:str}/chip")
    async def file_chip(
        self, chat: Chat, conversation: FoundConversation, file_id: FromPath[str]
    ) -> Template:
        """A file just uploaded (`POST /api/files`), as the composer's chip: its name and
        its tokens for the conversation's model, and the field the send carries."""
        takes_files(conversation)
        configuration = (
            conversation.draft.configuration
            if conversation.draft is not None
            else (await chat.reader.get(conversation.owner, conversation.id)).configuration
        )
        chip = await composer_chip(chat, conversation.owner, configuration, file_id)
        return Template("chat/_file_chip.html", context=_context(conversation, chip=chip))

    @post("/summary/{summary_id:int}")
    async def edit_summary(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
        summary_id: RowId,
    ) -> Response[Any]:
        """The owner's edit of the newest summary, from its dialog: used from the next send."""
        content = (await form_field(request, "content")).strip()
        if not content:
            raise InvalidInput("a summary is text: write what the model should see")
        if len(content) > chat.settings.max_message_chars:
            raise InvalidInput(f"a summary is at most {chat.settings.max_message_chars} characters")
        await chat.editor.edit_summary(conversation.owner, conversation.id, summary_id, content)
        return go_to(request, conversation.base)

    @post("/summaries")
    async def switch_summaries(
        self, request: Request[Any, Any, Any], chat: Chat, conversation: FoundConversation
    ) -> Response[Any]:
        """Summaries on or off for this conversation, from the summary's dialog."""
        choice = await form_field(request, "summarize")
        if choice not in ("on", "off"):
            raise InvalidInput("summarize is 'on' or 'off'")
        await chat.editor.set_summarize(conversation.owner, conversation.id, choice == "on")
        return go_to(request, conversation.base)

    @post("/pin/{message_id:int}")
    async def pin(self, chat: Chat, conversation: FoundConversation, message_id: RowId) -> Template:
        row = await chat.editor.pin(conversation.owner, conversation.id, message_id, True)
        return await _message(chat, row, conversation)

    @post("/unpin/{message_id:int}")
    async def unpin(
        self, chat: Chat, conversation: FoundConversation, message_id: RowId
    ) -> Template:
        row = await chat.editor.pin(conversation.owner, conversation.id, message_id, False)
        return await _message(chat, row, conversation)

    @post("/feedback/{answer_id:int}")
    async def feedback(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
        answer_id: RowId,
    ) -> Template:
        """A thumb pressed on an answer: given, replaced, or (pressed again) taken back."""
        pressed = feedback_value(await form_field(request, "value"))
        row = await chat.editor.feedback(
            conversation.owner, conversation.id, answer_id, pressed, toggle=True
        )
        # The answer's view names its thumbs after its turn, as the page did.
        message = answer_view(row, await chat.reader.user_row_of(row))
        return Template(
            "chat/_feedback.html",
            context={"row": row, "message": message, "base": conversation.base},
        )

    @post("/configuration")
    async def switch_configuration(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
    ) -> Response[Any]:
        """Bound the next send against another configuration's model, or one of the
        user's presets (its configuration, system prompt, temperature and answer room);
        not for embeds, whose configuration is the site owner's choice."""
        if conversation.embed is not None:
            raise InvalidInput("an embedded chat keeps its site's configuration")
        chosen = await form_field(request, "configuration")
        if chosen.startswith(PRESET_CHOICE):  # the picker's presets: "preset:<id>"
            preset_id = chosen.removeprefix(PRESET_CHOICE)
            if not preset_id.isdecimal():
                raise InvalidInput(f"no such preset: {chosen!r}")
            await chat.editor.set_preset(conversation.owner, conversation.id, int(preset_id))
        else:
            await chat.editor.set_configuration(conversation.owner, conversation.id, chosen)
        if not is_htmx(request):
            return go_to(request, conversation.base)
        # The page stays (the draft with it): the meter and the cut line show what the next
        # send would do against the new configuration's model, at once.
        # The composer's chips come along too: each is counted again for the new model.
        draft = await form_field(request, "content", required=False)
        files = await file_ids(request)
        meter = await next_send_meter(chat, conversation, draft, files)
        switched = await chat.reader.get(conversation.owner, conversation.id)
        return Template(
            "chat/_switched.html",
            context={
                "meter": meter,
                "base": conversation.base,
                "conversation": switched,
                "configurations": configuration_dicts(chat.catalog),
                "presets": await chat.presets.list(conversation.owner),
                "chips": await _recounted(chat, conversation.owner, switched, files),
                "internals": conversation.internals,
            },
        )

    @post("/stop", status_code=204)
    async def stop(self, chat: Chat, conversation: FoundConversation) -> None:
        await chat.stopper.stop(conversation.owner, conversation.id)

    @post("/tool-calls/{call_id:str}", status_code=204)
    async def decide_tool_call(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        conversation: FoundConversation,
        call_id: FromPath[str],
    ) -> None:
        """Allow or Deny pressed on a tool call's prompt (`approve`: "true" or "false"); the
        answer's stream then shows the decision (`approval`) and the call's result."""
        said = await form_field(request, "approve")
        if said not in ("true", "false"):
            raise InvalidInput("'approve' is true or false")
        await chat.approver.decide(conversation.owner, conversation.id, call_id, said == "true")

    @get("/answers/{answer_id:int}/stream")
    async def answer_stream(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        notices: Notices,
        conversation: FoundConversation,
        answer_id: RowId,
    ) -> ASGIApp:
        """The answer over SSE: the turn as HTML when it changes, its text as `content`
        events of what changed (webapp.chat.web.page_stream); reconnecting resumes from now.
        Past a worker's cap of followers (per answer, per owner) it answers 429."""
        settings = chat.settings
        owner = conversation.owner
        answer = await answer_to_follow(chat, owner, conversation.id, answer_id)
        place = ExitStack()
        place.enter_context(
            WATCHERS.hold(
                owner,
                answer_id,
                per_answer=settings.watchers_per_answer,
                per_owner=settings.watchers_per_user,
            )
        )
        try:
            user = await chat.reader.user_row_of(answer)
            # The user row is re-rendered with the turn: it keeps its "‹ i/n ›".
            alternatives = await chat.reader.alternatives_of(conversation.id, [user])
        except BaseException:
            place.close()
            raise
        kind = (conversation.base, conversation.internals, tuple(sorted(alternatives.items())))

        def turn_frame(snapshot: Snapshot) -> str:
            return render_fragment(
                "chat/_stream_update.html",
                **_context(
                    conversation,
                    answer=answer_view(
                        snapshot.answer, snapshot.user, snapshot.prefill, snapshot.tools
                    ),
                    user=message_views([snapshot.user], alternatives)[0],
                ),
            )

        def snapshots() -> AsyncIterator[Snapshot]:
            return snapshots_of(chat, owner, conversation.id, answer, notices)

        async def events() -> AsyncIterator[bytes]:
            cursor = PageCursor(floor=len(answer.content))
            with place, LIVE_PAGES.following(answer_id, snapshots) as live:
                async for frame in live.frames_for(cursor, kind, turn_frame):
                    yield frame

        return EventStream(events())


class ConversationAdmin(Controller):
    """What only a conversation's owner does from the full app: start, rename, delete."""

    include_in_schema = False

    @get("/")
    async def home(self, request: Request[Any, Any, Any], chat: Chat, owner: Owner) -> Redirect:
        conversations = await chat.reader.conversations(owner, limit=1)
        conversation = (
            conversations[0]
            if conversations
            else await chat.editor.fresh(owner, default_configuration(request, chat), chosen=False)
        )
        return Redirect(f"/c/{conversation.id}", status_code=303)

    @get("/conversations")
    async def more_conversations(
        self,
        chat: Chat,
        owner: Owner,
        offset: Annotated[int, QueryParameter(ge=0, le=10**9)],
        current: FromQuery[str] = "",
        tag: FromQuery[str] = "",
    ) -> Template:
        """The sidebar's next page of conversations (from 0: the list filtered anew by
        `tag`, empty for all): a day group that began on the page before goes on under
        the heading already shown, not a second one."""
        wanted = clean_tag(tag) if tag else None
        context = await sidebar(chat, owner, offset, current, wanted)
        before = (
            await chat.reader.conversations(owner, limit=1, offset=offset - 1, tag=wanted)
            if offset
            else []
        )
        context["continues"] = (
            (PINNED_GROUP if before[0].pinned else day_label(before[0].updated_at, utcnow()))
            if before
            else None
        )
        return Template("chat/_conversation_list.html", context=context)

    @get("/search")
    async def search(
        self, chat: Chat, owner: Owner, q: FromQuery[str] = "", tag: FromQuery[str] = ""
    ) -> Template:
        """The sidebar's results as the user types (within the tag the sidebar is filtered
        by, if any); an empty box shows none."""
        hits = await chat.reader.search(owner, q, tag or None) if q.strip() else None
        return Template("chat/_search_results.html", context={"hits": hits, "query": q})

    @post("/c/import")
    async def import_file(
        self, request: Request[Any, Any, Any], chat: Chat, owner: Owner, files: Files
    ) -> Response[Any]:
        """A JSON export chosen in the sidebar becomes a new conversation, opened at once
        (ChatGPT's `conversations.json`: each of its conversations, the first opened; an
        export of this app's with the files it carries)."""
        form = await request.form()
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise InvalidInput("choose a JSON export to import")
        raw = await upload.read(MAX_IMPORT_BYTES + 1)
        if len(raw) > MAX_IMPORT_BYTES:
            raise InvalidInput(f"an import file is at most {MAX_IMPORT_BYTES // 2**20} MB")
        await ImportQuota(chat.db, chat.settings).take(owner, len(raw))
        data = await asyncio.to_thread(decode_export, raw)  # 20 MB of JSON: off the loop
        if is_chatgpt_export(data):  # ChatGPT's conversations.json: open the first one
            conversations, _ = await chat.editor.import_chatgpt(owner, data)
            return go_to(request, f"/c/{conversations[0].id}" if conversations else "/")
        if not isinstance(data, dict):
            raise InvalidInput("that file is not an export: import a conversation's JSON export")
        conversation = await with_files(files, chat.db, chat.editor, owner, data)
        return go_to(request, f"/c/{conversation.id}")

    @post("/c/new")
    async def new_conversation(
        self, request: Request[Any, Any, Any], chat: Chat, owner: Owner
    ) -> Response[Any]:
        configuration = await form_field(request, "configuration", required=False)
        # The sidebar's select keeps the default configuration: a default preset comes first.
        conversation = await chat.editor.fresh(
            owner, configuration or default_configuration(request, chat), chosen=False
        )
        return go_to(request, f"/c/{conversation.id}")

    @post("/c/{conversation_id:str}/rename")
    async def rename(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
    ) -> Template:
        title = await form_field(request, "title")
        conversation = await chat.editor.rename(owner, conversation_id, title)
        # The header's form and the sidebar's link, in one answer: both say the new name.
        return Template(
            "chat/_renamed.html",
            context={"conversation": conversation, "renamed": True, "current_id": conversation.id},
        )

    @get("/c/{conversation_id:str}/title")
    async def title(
        self, chat: Chat, owner: Owner, conversation_id: FromPath[str], was: FromQuery[str] = ""
    ) -> Template:
        """Held until the title is no longer `was`: the page asks once its first answer is
        done, and the model's title (`webapp.chat.naming`) shows in the header
        and sidebar."""
        conversation = await chat.titler.title_after(owner, conversation_id, was)
        return Template(
            "chat/_renamed.html",
            context={"conversation": conversation, "current_id": conversation.id},
        )

    @post("/c/{conversation_id:str}/delete")
    async def delete(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        owner: Owner,
        conversation_id: FromPath[str],
    ) -> Response[Any]:
        await chat.editor.delete(owner, conversation_id)
        return go_to(request, "/")


PINNED_GROUP = "Pinned"
PRESET_CHOICE = "preset:"
"""The header picker's value for one of the user's presets, beside configuration names."""


def default_configuration(request: Request[Any, Any, Any], chat: ChatJobs) -> str:
    """The configuration new conversations of the signed-in user start with."""
    catalog = chat.catalog
    user = request.scope.get("user")
    return preferred_configuration(user, catalog.configurations) or catalog.default_configuration


async def sidebar(
    chat: ChatJobs, owner: str, offset: int, current_id: str, tag: str | None = None
) -> dict[str, Any]:
    """One page of the sidebar: pinned conversations, then the rest grouped by day, and
    where the next page starts; only those carrying `tag` (cleaned) when given."""
    rows = await chat.reader.conversations(owner, limit=SIDEBAR_PAGE + 1, offset=offset, tag=tag)
    shown = rows[:SIDEBAR_PAGE]
    pinned = [c for c in shown if c.pinned]
    groups = ([(PINNED_GROUP, pinned)] if pinned else []) + group_by_day(
        [c for c in shown if not c.pinned], utcnow()
    )
    return {
        "conversations": shown,
        "groups": groups,
        "tags": await chat.reader.tags_of([c.id for c in shown]),
        "more_offset": offset + SIDEBAR_PAGE if len(rows) > SIDEBAR_PAGE else None,
        "current_id": current_id,
        "tag": tag,
    }


SWITCH_PROBE = "?"
"""What a configuration switch with an empty composer previews: the history and a
one-character message, so the meter can say at once how the new model takes the history."""


async def next_send_meter(
    chat: ChatJobs, conversation: ConversationRef, content: str, files: list[str] | None = None
) -> Meter:
    """The meter for the next send of `content` and `files` (the history alone when both
    are empty)."""
    probe = content if content.strip() else SWITCH_PROBE  # a message is never files alone
    row, fit = await chat.previewer.preview_fit(
        conversation.owner, conversation.id, probe, files or []
    )
    alternatives = () if conversation.embed else larger_windows(chat, row.fit_window or 0)
    return Meter.of_row(
        row,
        preview=True,
        alternatives=alternatives,
        turns_left=fit.turns_left,
        typed=bool(content.strip() or files),
    )


async def _recounted(
    chat: ChatJobs, owner: str, conversation: Conversation, files: list[str]
) -> list[FileView]:
    """The composer's chips counted for the conversation's configuration now (a file
    deleted meanwhile is left out: its chip keeps what it said)."""
    chips = []
    for file_id in files:
        try:
            chips.append(await composer_chip(chat, owner, conversation.configuration, file_id))
        except NotFound:
            continue
    return chips


def larger_windows(chat: ChatJobs, window: int) -> tuple[Alternative, ...]:
    """Configurations whose serving model has a larger window than `window`, largest
    first: switching to one is the meter's remedy for a trimmed send."""
    found = [
        Alternative(entry["name"], entry["serving_model"], entry["window"])
        for entry in configuration_dicts(chat.catalog)
        if entry["window"] and entry["window"] > window
    ]
    return tuple(sorted(found, key=lambda alt: -alt.window)[:2])


async def _regenerate(chat: ChatJobs, conversation: ConversationRef, message_id: int) -> Template:
    row = await chat.reader.message(conversation.owner, conversation.id, message_id)
    user = row if row.role == "user" else await chat.reader.user_row_of(row)
    await chat.sender.regenerate(
        conversation.owner, conversation.id, id_of(user), address=conversation.address
    )
    return await _branch_page(chat, conversation)


async def _branch_page(
    chat: ChatJobs, conversation: ConversationRef, before: int | None = None
) -> Template:
    """The active branch's newest page (or the page before seq `before`), as the messages
    pane shows it: what regenerate, edit and switching branches swap in."""
    row, rows, has_older = await chat.reader.page(
        conversation.owner, conversation.id, before_seq=before, turns=PAGE_TURNS
    )
    alternatives = await chat.reader.alternatives_of(conversation.id, rows)
    return Template(
        "chat/_messages.html", context=await _pane(conversation, row, rows, alternatives, has_older)
    )


def _context(ref: ConversationRef, /, **context: Any) -> dict[str, Any]:
    """A page's or a partial's context: each links under the conversation's `base`, and
    shows token counts and names, or not, as its `internals` says."""
    return {"base": ref.base, "internals": ref.internals, **context}


async def _pane(
    conversation: ConversationRef,
    row: Conversation,
    rows: list[Message],
    alternatives: dict[int, Alternatives],
    has_older: bool,
) -> dict[str, Any]:
    """The messages pane's context: the page shows it first, `_branch_page` swaps it in."""
    messages = await prerendered(message_views(rows, alternatives))
    return _context(conversation, conversation=row, messages=messages, has_older=has_older)


async def _message(chat: ChatJobs, row: Message, conversation: ConversationRef) -> Template:
    alternatives = await chat.reader.alternatives_of(conversation.id, [row])
    message = await prerendered_view(message_views([row], alternatives)[0])
    return Template("chat/_message.html", context=_context(conversation, message=message))


def _turn(send: Send, conversation: ConversationRef) -> Template:
    return Template(
        "chat/_turn.html",
        context=_context(
            conversation,
            conversation=send.conversation,
            embed=conversation.embed,
            # A continuation shows only its answer, again in its place: no new turn.
            messages=message_views([send.user, send.answer])[1 if send.continued else 0 :],
        ),
    )


@dataclass(frozen=True, slots=True)
class SummaryPanel:
    """The summary dialog's context: the active branch's newest summary, and whether the
    conversation's sends carry one."""

    summary: Summary | None
    on: bool


async def summary_panel(
    chat: ChatJobs, owner: str, conversation: Conversation
) -> SummaryPanel | None:
    """The dialog's context (None: summaries are off and none was ever written)."""
    summaries = await chat.reader.summaries(owner, conversation.id)
    configuration = chat.catalog.configurations.get(conversation.configuration)
    default = configuration.summarize if configuration is not None else False
    on = conversation.summarize if conversation.summarize is not None else default
    if not on and not summaries:
        return None
    return SummaryPanel(summaries[-1] if summaries else None, on)
