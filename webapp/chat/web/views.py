"""Messages as the pages show them: rendered text, trim markers in words, status labels."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise

from markupsafe import Markup, escape

from webapp.chat.stored.attachments import attachment_html, split_attachment
from webapp.chat.stored.branches import Alternatives, parent_of
from webapp.chat.stored.history import is_replayable
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.chat.stored.serialize import left_out_words, status_label
from webapp.chat.web.file_views import FileView, sent_files
from webapp.chat.web.tool_views import ToolPart, is_step, steps_of
from webapp.llm.clearing import said
from webapp.llm.providers.base import Prefill
from webapp.stored import id_of
from webapp.timeutil import as_utc
from webapp.web.markdown import name_code_copies, render_markdown, scrollable_parts_focusable

COLLAPSE_CHARS = 1500
COLLAPSE_LINES = 20


def plural(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


@dataclass(slots=True)
class MessageView:
    row: Message
    alternatives: Alternatives | None = None
    """On a user row with alternatives: where it sits among them ("‹ 2/3 ›")."""
    never_sent: bool = False
    """The turn's answer is final and will never be replayed (it failed, or stopped
    empty): a left-out span that runs over it does not make it a turn the model missed."""
    asked_by: Message | None = None
    """On an answer: the user row it answers, whose send's fit (did it move the cut?)
    explains the answer's cache note."""
    prefill: Prefill | None = None
    """On an answer that has no text yet: how far the engine has read the prompt."""
    tools: tuple[ToolPart, ...] = ()
    """On an answer: the tool calls made for it, in order (`tool_views`)."""

    @property
    def left_out(self) -> list[list[int]]:
        """The [first, last] seq spans this send left out, as stored when it was sent."""
        return self.row.fit_left_out or []

    @property
    def left_out_json(self) -> str:
        return json.dumps(self.left_out, separators=(",", ":"))

    @property
    def is_user(self) -> bool:
        return self.row.role == Role.USER

    @property
    def files(self) -> tuple[FileView, ...]:
        """The files sent with the message, under its text: pictures as thumbnails and
        PDFs as links to the document itself. A text file is not listed: its text is
        already a part of the message that opens (`html`), and it is shown once."""
        return tuple(f for f in sent_files(self.row.attachments) if f.kind != "text")

    @property
    def html(self) -> Markup:
        if self.is_user:
            return attachment_html(self.row.content) or escape(self.row.content)
        if self.row.content_html is not None and self.row.status != Status.STREAMING:
            # Sanitized when it was stored (perhaps before code blocks took the focus).
            html = scrollable_parts_focusable(self.row.content_html)
        else:
            html = str(render_markdown(self.row.content))
        return Markup(name_code_copies(html, self.named("answer")))

    @property
    def turn_number(self) -> int | None:
        """The turn's number on its branch, as stored on its user row (so a page of a long
        conversation numbers its turns without reading the ones before): what makes the
        names of its controls ("Pin turn 3", "Copy answer 3") tell them apart. Rows from
        before turn numbers were stored count from `prior_turns`."""
        user = self.row if self.is_user else self.asked_by
        if user is not None and user.turn_number is not None:
            return user.turn_number
        if user is None or user.prior_turns is None:
            return None
        return user.prior_turns + 1

    def named(self, noun: str) -> str:
        """`noun` with the turn's number, when known: "turn 3", "answer 3"."""
        number = self.turn_number
        return f"{noun} {number}" if number is not None else noun

    @property
    def speaker(self) -> str:
        """Who wrote it, as a screen reader names the message."""
        return "You" if self.is_user else "Assistant"

    @property
    def plain_trim_label(self) -> str | None:
        """The trim marker's words without the model's name: what an embed's visitors
        read when the embed does not show internals."""
        dropped = self.row.dropped_turns
        if not self.is_user or not dropped:
            return None
        return left_out_words(dropped, self.row.fit_pins_dropped or 0, None)

    @property
    def trim_label(self) -> str | None:
        dropped = self.row.dropped_turns
        if not self.is_user or not dropped:
            return None
        return left_out_words(dropped, self.row.fit_pins_dropped or 0, self.row.fit_model)

    @property
    def collapsible(self) -> bool:
        """A long paste is shown folded, with "Show more": the history stays readable."""
        if not self.is_user:  # an answer is never folded: its text is not split either
            return False
        content = split_attachment(self.row.content)[0]  # an attachment folds on its own
        return len(content) > COLLAPSE_CHARS or content.count("\n") >= COLLAPSE_LINES

    @property
    def meter(self) -> Meter:
        return Meter.of_row(self.row)

    @property
    def status_label(self) -> str | None:
        return status_label(self.row.status)

    @property
    def cache_words(self) -> str | None:
        """On a finished answer whose engine said how much of the prompt its cache served:
        that share, in tokens (None: the engine did not say, or there is no prompt yet)."""
        row = self.row
        if self.is_user or row.status == Status.STREAMING:
            return None
        cached, prompt = row.cached_tokens, row.prompt_tokens
        if cached is None or not prompt or prompt <= 0:
            return None
        if cached <= 0:
            return f"None of the {prompt:,} prompt tokens came from the engine's cache."
        return f"{min(cached, prompt):,} of {prompt:,} prompt tokens came from the engine's cache."

    @property
    def waiting_since(self) -> str | None:
        """On an answer the engine has sent nothing of, and says nothing of its reading of
        the prompt: when it was asked (the page counts the time waited from it)."""
        row = self.row
        if self.is_user or row.status != Status.STREAMING or row.content or self.prefill:
            return None
        return as_utc(row.created_at).isoformat().replace("+00:00", "Z")

    @property
    def cache_ledger(self) -> list[tuple[str, str]]:
        """The answer's prompt as the engine took it: served from its cache, evaluated,
        written to its cache; each only where the engine said it (empty: it said none)."""
        row = self.row
        if self.is_user or row.status == Status.STREAMING:
            return []
        said = (
            ("Served from the engine's cache", row.cached_tokens),
            ("Evaluated by the engine", row.evaluated_tokens),
            ("Written to the engine's cache", row.cache_write_tokens),
        )
        return [(term, f"{count:,} tokens") for term, count in said if count is not None]

    @property
    def cut_moved_words(self) -> str | None:
        """Why the cache served little this time: the send that asked moved the cut."""
        user = self.asked_by
        if self.is_user or user is None or not user.fit_cut_moved:
            return None
        return cut_moved_words(user.fit_trim_to)

    @property
    def cleared_words(self) -> str | None:
        """The turn's note when its send carried older tool results as stubs ("3 older
        tool results cleared, 12,410 tokens"); on an answer, its question's."""
        row = self.row if self.is_user else self.asked_by
        return said(row.fit_cleared) if row is not None else None

    @property
    def cut_fact(self) -> str | None:
        """On a user row whose send moved the cut: the fit facts' line about it."""
        if not self.is_user or not self.row.fit_cut_moved:
            return None
        return cut_moved_words(self.row.fit_trim_to, fact=True)


def cut_moved_words(trim_to: float | None, *, fact: bool = False) -> str:
    """What a moved cut means for the engine's prompt cache: the prompt changed right after
    the opening exchange. With room left by the move (`trim_to` below 1) the next sends
    are appends again; with the plain rule the cut moves on every send that does not fit."""
    lead = "Moved on this send" if fact else "This send moved the cut"
    if trim_to is not None and trim_to < 1.0:
        return (
            f"{lead}: older turns were left out at once, so the next several sends "
            "can reuse the engine's cache."
        )
    return f"{lead}, so the engine could reuse little of its cached prompt."


def cut_line_words(dropped: int, *, preview: bool = False, summary: int | None = None) -> str:
    """The cut line's words, plain and short enough for one line on a phone: the turns
    between the opening exchange and the line are not sent (that the opening exchange
    still is, the trimmed turn's note says); with a summary, what is sent instead."""
    turns = "the turn above" if dropped == 1 else f"the {dropped:,} turns above"
    if summary is not None:
        sees = "will see" if preview else "sees"
        return f"The model {sees} a summary instead of {turns}"
    if preview:
        return f"The model will no longer see {turns}"
    return f"The model no longer sees {turns}"


def answer_view(
    answer: Message,
    user: Message | None,
    prefill: Prefill | None = None,
    tools: tuple[ToolPart, ...] = (),
) -> MessageView:
    """An answer shown on its own (a stream's snapshot), with the user row it answers, how
    far the engine has read the prompt while it has sent no text, and its tool calls."""
    return MessageView(answer, asked_by=user, prefill=prefill, tools=tools)


@dataclass(frozen=True, slots=True)
class Alternative:
    """A configuration whose model has a larger window: the meter's one-click remedy."""

    name: str
    model: str
    window: int


@dataclass(frozen=True, slots=True)
class Meter:
    """The context meter: the last send's fit, or, while the user types, the next one's."""

    model: str | None
    window: int
    budget: int
    estimated_tokens: int
    dropped_turns: int
    pins_dropped: int = 0
    counted_by: str | None = None
    overflow_at_floor: bool = False
    preview: bool = False
    alternatives: tuple[Alternative, ...] = ()
    turns_left: int | None = None
    """About how many more turns of the size of those sent fit after this send before the
    cut must move (None: not known, as for a stored send, whose fit keeps no such guess)."""
    typed: bool = False
    """A preview of text being typed (not of the history alone, after a switch)."""
    cut_moved: bool = False
    """This fit moves the cut (or starts it): turns the last send carried would go."""
    left_out: tuple[tuple[int, int], ...] = ()
    summary: int | None = None
    """The version of the summary the send carries instead of the turns it leaves out."""

    @classmethod
    def of_row(
        cls,
        row: Message,
        *,
        preview: bool = False,
        alternatives: tuple[Alternative, ...] = (),
        turns_left: int | None = None,
        typed: bool = False,
    ) -> Meter:
        """From a user row's fit: one stored, or the unsaved row a preview makes."""
        return cls(
            model=row.fit_model,
            window=row.fit_window or 0,
            budget=row.fit_budget or 0,
            estimated_tokens=row.fit_estimated_tokens or 0,
            dropped_turns=row.dropped_turns or 0,
            pins_dropped=row.fit_pins_dropped or 0,
            counted_by=row.fit_counted_by,
            overflow_at_floor=bool(row.fit_overflow_at_floor),
            preview=preview,
            alternatives=alternatives,
            turns_left=turns_left,
            typed=typed,
            cut_moved=bool(row.fit_cut_moved),
            left_out=tuple((span[0], span[1]) for span in row.fit_left_out or ()),
            summary=row.fit_summary,
        )

    @property
    def over(self) -> bool:
        """Said ("Over") only while the text being typed would leave out turns the last
        send still carried, or would not fit even with the opening exchange alone: a
        conversation that was trimmed before is no alarm on every send."""
        if not (self.preview and self.typed):
            return False
        return self.overflow_at_floor or (self.dropped_turns > 0 and self.cut_moved)

    @property
    def left_out_json(self) -> str:
        return json.dumps(self.left_out, separators=(",", ":"))

    @property
    def cut_words(self) -> str:
        """What the cut line says when it is drawn from this fit ("" when none is drawn)."""
        if not self.dropped_turns:
            return ""
        return cut_line_words(self.dropped_turns, preview=self.preview, summary=self.summary)

    @property
    def advice(self) -> str | None:
        """What to do about a next send that leaves turns out, written for the case: the
        switch buttons stand before it when a larger window exists."""
        if not (self.preview and self.dropped_turns):
            return None
        if self.alternatives:
            return "Or pin the turns you need kept."
        return "Pin the turns you need kept, or start a new conversation."

    @property
    def fill_percent(self) -> int:
        if self.dropped_turns or self.overflow_at_floor:
            return 100
        return min(100, round(100 * self.estimated_tokens / self.budget)) if self.budget else 0

    @property
    def words(self) -> str:
        if self.overflow_at_floor:
            return "Even the opening exchange and this message do not fit; sent anyway"
        if self.dropped_turns:
            return left_out_words(
                self.dropped_turns, self.pins_dropped, self.model, will=self.preview
            )
        to = f" to {self.model}" if self.model else ""
        if self.preview:
            return f"Everything will be sent{to}"
        return f"Everything was sent{to}"

    @property
    def plain_words(self) -> str:
        """`words` without the model's name (an embed that does not show internals)."""
        return replace(self, model=None).words

    @property
    def ahead_words(self) -> str | None:
        """How long until older turns are left out (again), when the fit could tell. A
        preview's count starts after the send being typed, a last send's after that send."""
        left = self.turns_left
        if left is None:
            return None
        # After a send that leaves turns out, the next cut leaves out more of them.
        which = "more" if self.dropped_turns else "older"
        if left <= 0:
            if self.preview:
                return f"the send after this one will leave {which} turns out"
            return f"the next send will leave {which} turns out"
        then = "then " if self.preview else ""
        more = "more turn" if left == 1 else "more turns"
        return f"{then}about {left:,} {more} before {which} turns are left out"


def day_label(when: datetime, now: datetime) -> str:
    """Which group of the sidebar a conversation last touched at `when` falls in (UTC days:
    the server does not know the reader's zone)."""
    days = (as_utc(now).date() - as_utc(when).date()).days
    if days <= 0:
        return "Today"
    if days == 1:
        return "Yesterday"
    if days < 7:
        return "Previous 7 days"
    if days < 30:
        return "Previous 30 days"
    return as_utc(when).strftime("%B %Y")


def group_by_day(
    conversations: list[Conversation], now: datetime
) -> list[tuple[str, list[Conversation]]]:
    """Newest first, as listed, cut into runs that share a day label."""
    groups: list[tuple[str, list[Conversation]]] = []
    for conversation in conversations:
        label = day_label(conversation.updated_at, now)
        if not groups or groups[-1][0] != label:
            groups.append((label, []))
        groups[-1][1].append(conversation)
    return groups


def message_views(
    rows: list[Message], alternatives: Mapping[int, Alternatives] | None = None
) -> list[MessageView]:
    alternatives = alternatives or {}
    views: list[MessageView] = []
    steps: list[Message] = []
    for row in rows:  # a turn's tool steps are stored after its answer: shown in it
        if is_step(row):
            steps.append(row)
            continue
        _take_steps(views, steps)
        views.append(MessageView(row, alternatives.get(id_of(row))))
    _take_steps(views, steps)
    for user, answer in pairwise(views):
        if user.is_user and not answer.is_user and parent_of(answer.row) == user.row.seq:
            answer.asked_by = user.row
        if user.is_user and answer.row.seq == user.row.seq + 1:
            done = answer.row.status != Status.STREAMING
            never = done and not is_replayable(answer.row.status, answer.row.content)
            user.never_sent = answer.never_sent = never
    return views


def _take_steps(views: list[MessageView], steps: list[Message]) -> None:
    """Give the tool steps read so far to the answer they belong to (the last view)."""
    if steps and views and not views[-1].is_user:
        views[-1].tools = steps_of(steps)
    steps.clear()


def last_fit(rows: list[Message]) -> Meter | None:
    """The newest user row whose fit was evaluated: what the context meter shows."""
    for row in reversed(rows):
        if row.role == Role.USER and row.dropped_turns is not None:
            return Meter.of_row(row)
    return None
