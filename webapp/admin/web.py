"""The admin review on the web: the list of trimmed conversations (page, JSON, CSV) and
the review of one conversation. Admins only: `admin_only` guards the whole controller.

Query parameters are parsed by `webapp.admin.listing`, the one place that says what a
list may ask for. The filter form is a GET: nothing here changes state, so there is no
CSRF token to carry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Annotated, Any

from litestar import Controller, Request, get
from litestar.params import FromPath, QueryParameter
from litestar.response import Response, Template

from webapp.accounts.guards import admin_only
from webapp.admin import queries
from webapp.admin.chart import per_day_chart, per_model_chart
from webapp.admin.listing import (
    LIST_PATH,
    MAX_PER_PAGE,
    SORTS,
    Listing,
    parse_listing,
    parse_review_paging,
)
from webapp.admin.queries import CacheDay, LeftOutBy, Page, Review, TrimmedRow, TrimmedTurn
from webapp.chat.stored.models import Message, Role
from webapp.chat.web.deps import Chat
from webapp.chat.web.views import MessageView
from webapp.llm.calibration import learned_windows
from webapp.llm.engine import UNREPORTED_CACHE
from webapp.llm.window import runs_of
from webapp.web.markdown import prerendered

CHART_DAYS = 30
COLUMNS = (
    ("title", "Conversation"),
    ("owner", "Owner"),
    ("configuration", "Configuration"),
    ("models", "Model(s) that served"),
    ("trimmed_turns", "Trimmed turns"),
    ("most_dropped", "Most left out at once"),
    ("last_activity", "Last activity (UTC)"),
)


def row_dict(row: TrimmedRow) -> dict[str, Any]:
    data = asdict(row)
    data["last_activity"] = row.last_activity.isoformat().replace("+00:00", "Z")
    data["review_url"] = f"/admin/c/{row.conversation_id}"
    return data


def cache_dict(row: CacheDay) -> dict[str, Any]:
    """One (model, day) of the prompt cache; `cached_share` is null when unknown."""
    return {
        "day": row.day.isoformat(),
        "model": row.model,
        "cached_share": row.share,
        "cached_tokens": row.cached_tokens,
        "prompt_tokens": row.prompt_tokens,
        "answers_with_cache_report": row.reported,
        "answers_without_cache_report": row.unreported,
        "cut_moved_sends": row.cut_moved,
        "evaluated_tokens": row.evaluated_tokens,
        "cache_write_tokens": row.cache_write_tokens,
        "tool_results_cleared_sends": row.cleared,
    }


@dataclass(frozen=True, slots=True)
class ReviewTurn:
    """One turn as the review shows it: a user message and what answered it."""

    number: int
    """As people count turns: 1 for the first message (0 for rows before any user row)."""
    messages: list[MessageView]
    trimmed: TrimmedTurn | None
    """When this turn's send left earlier turns out."""
    left_out_spans: list[tuple[int, int]]
    """The turns this send left out, as runs of turn numbers."""
    left_out_by: LeftOutBy | None
    """When later sends left this turn out."""
    files_sent: list[str] = field(default_factory=list)
    files_left_out: list[str] = field(default_factory=list)
    """The files this send carried and left out, each named with its tokens for the fit's
    model ("photo.png, 255 tokens")."""


def named_files(review: Review, row: Message | None) -> tuple[list[str], list[str]]:
    """A send's files sent and left out, by name and tokens (files a turn of this review
    carried; a file named nowhere in it by its id)."""
    carried = (row.fit_attachments if row is not None else None) or {}
    known = {a["id"]: a for m in review.messages for a in m.attachments or []}

    def said(file_id: str) -> str:
        found = known.get(file_id)
        if found is None:
            return file_id
        tokens = (found.get("token_counts") or {}).get(row.fit_model if row else None)
        return f"{found['name']}, {tokens:,} tokens" if tokens is not None else found["name"]

    return [said(i) for i in carried.get("sent", [])], [
        said(i) for i in carried.get("left_out", [])
    ]


def left_out_spans(review: Review, turn: TrimmedTurn) -> list[tuple[int, int]]:
    """A send's left-out turns as runs of turn numbers, as people count turns: broken
    where a turn in between was never sendable (its answer failed)."""
    return list(runs_of([review.turn_numbers[seq] for seq in review.left_out(turn)]))


def review_turns(review: Review) -> list[ReviewTurn]:
    by_seq = {turn.seq: turn for turn in review.trimmed}
    left_out_by = review.left_out_by()
    numbers = review.turn_numbers
    groups: list[tuple[int, list[Message]]] = []
    for row in review.messages:
        if row.role == Role.USER or not groups:
            groups.append((row.seq if row.role == Role.USER else 0, []))
        groups[-1][1].append(row)
    turns = []
    for seq, rows in groups:
        trimmed = by_seq.get(seq)
        sent, left_out = named_files(review, rows[0] if rows[0].role == Role.USER else None)
        turns.append(
            ReviewTurn(
                number=numbers.get(seq, 0),
                messages=[MessageView(row) for row in rows],
                trimmed=trimmed,
                left_out_spans=left_out_spans(review, trimmed) if trimmed else [],
                left_out_by=left_out_by.get(seq),
                files_sent=sent,
                files_left_out=left_out,
            )
        )
    return turns


class AdminController(Controller):
    guards = (admin_only,)
    include_in_schema = False

    async def _page(
        self, chat: Chat, listing: Listing, *, everything: bool = False
    ) -> Page[TrimmedRow]:
        return await chat.db.read(
            partial(queries.trimmed_conversations, listing=listing, everything=everything)
        )

    @get(LIST_PATH)
    async def trimmed_page(self, request: Request[Any, Any, Any], chat: Chat) -> Template:
        listing = parse_listing(request.query_params)
        page = await self._page(chat, listing)
        per_day = await chat.db.read(queries.trimmed_per_day, CHART_DAYS)
        per_model = await chat.db.read(queries.trimmed_per_model)
        prompt_cache = await chat.db.read(queries.prompt_cache_per_model_day, CHART_DAYS)
        catalog = chat.catalog
        return Template(
            "admin/trimmed.html",
            context={
                "listing": listing,
                "page": page,
                "columns": COLUMNS,
                "per_day_chart": per_day_chart(per_day),
                "per_model_chart": per_model_chart(per_model),
                "chart_days": CHART_DAYS,
                "prompt_cache": prompt_cache,
                "unreported_cache": queries.unreported_models(prompt_cache),
                "unreported_cache_words": UNREPORTED_CACHE,
                "learned_windows": await chat.db.read(learned_windows),
                "configurations": sorted(catalog.configurations),
                "models": sorted(catalog.models),
                "csv_url": listing.url(f"{LIST_PATH}.csv", page=1),
                "api_url": listing.url("/api/admin/trimmed"),
            },
        )

    @get(f"{LIST_PATH}.csv")
    async def trimmed_csv(self, request: Request[Any, Any, Any], chat: Chat) -> Response[str]:
        """Every matching row (not one page), in the list's sort order."""
        page = await self._page(chat, parse_listing(request.query_params), everything=True)
        return Response(
            queries.to_csv(page.items),
            media_type="text/csv",  # Litestar adds "; charset=utf-8" to text types
            headers={
                "Content-Disposition": 'attachment; filename="trimmed-conversations.csv"',
                "Cache-Control": "no-store",
            },
        )

    @get("/api/admin/trimmed", include_in_schema=True, tags=["admin"])
    async def trimmed_api(
        self,
        chat: Chat,
        configuration: Annotated[
            str | None, QueryParameter(description="configuration name")
        ] = None,
        model: Annotated[str | None, QueryParameter(description="a model that served")] = None,
        # Not named `owner`: that is the app-wide dependency (who is asking), which would
        # shadow the query parameter and drop it from the schema.
        owner_filter: Annotated[
            str | None,
            QueryParameter(name="owner", description="username, raw owner, or embed:<name>"),
        ] = None,
        since: Annotated[str | None, QueryParameter(description="YYYY-MM-DD, UTC")] = None,
        until: Annotated[str | None, QueryParameter(description="YYYY-MM-DD, UTC")] = None,
        feedback: Annotated[
            str | None,
            QueryParameter(description="up or down: conversations with an answer rated so"),
        ] = None,
        sort: Annotated[str | None, QueryParameter(description=", ".join(SORTS))] = None,
        order: Annotated[str | None, QueryParameter(description="asc or desc")] = None,
        page: Annotated[str | None, QueryParameter(description="1 or more")] = None,
        per_page: Annotated[str | None, QueryParameter(description=f"1 to {MAX_PER_PAGE}")] = None,
    ) -> dict[str, Any]:
        """Conversations with at least one trimmed turn, with the same filters as the page;
        and, as on the page and unfiltered, the prompt cache per model and UTC day over the
        last days (`prompt_cache`: share of prompt tokens the engine served from its cache,
        null when no answer had a cache report). With `feedback`, the conversations with an
        answer rated up (or down), trimmed or not."""
        listing = parse_listing(
            {
                "configuration": configuration,
                "model": model,
                "owner": owner_filter,
                "since": since,
                "until": until,
                "feedback": feedback,
                "sort": sort,
                "order": order,
                "page": page,
                "per_page": per_page,
            }
        )
        result = await self._page(chat, listing)
        prompt_cache = await chat.db.read(queries.prompt_cache_per_model_day, CHART_DAYS)
        return {
            "rows": [row_dict(row) for row in result.items],
            "total": result.total,
            "page": result.page,
            "per_page": result.per_page,
            "pages": result.pages,
            "sort": listing.sort,
            "order": listing.order,
            "prompt_cache": {
                "days": CHART_DAYS,
                "rows": [cache_dict(row) for row in prompt_cache],
                "unreported": [
                    {"model": model, "note": UNREPORTED_CACHE}
                    for model in queries.unreported_models(prompt_cache)
                ],
            },
        }

    @get("/admin/c/{conversation_id:str}")
    async def review_page(
        self, request: Request[Any, Any, Any], chat: Chat, conversation_id: FromPath[str]
    ) -> Template:
        """A page of the conversation's turns (`page`, `per_page`), and of each trimmed
        send on it a page of its left-out spans (`spans`): what the page shows is all it
        reads, however many turns and spans the conversation holds."""
        paging = parse_review_paging(request.query_params)
        review = await chat.db.read(queries.review, conversation_id, paging)
        turns = review_turns(review)
        await prerendered([view for turn in turns for view in turn.messages])
        path = f"/admin/c/{conversation_id}"
        return Template(
            "admin/review.html",
            context={
                "review": review,
                "conversation": review.conversation,
                "turns": turns,
                "list_url": LIST_PATH,
                "paging": paging,
                "path": path,
                "previous_url": paging.url(path, page=paging.page - 1) if paging.page > 1 else None,
                "next_url": paging.url(path, page=paging.page + 1)
                if paging.page < review.pages
                else None,
                "earlier_spans_url": paging.url(path, spans=paging.spans - 1)
                if paging.spans > 1
                else None,
                "later_spans_url": paging.url(path, spans=paging.spans + 1)
                if any(turn.trimmed and turn.trimmed.more_spans for turn in turns)
                else None,
            },
        )
