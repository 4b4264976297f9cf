"""What one list of trimmed conversations asks for: filters, sort and page, checked once.

The page, its CSV export, the JSON API and the query layer all take a `Listing`, and a
`Listing` cannot be built with an unknown sort column, a page out of range or an empty
date range, so the rules (and the one page cap) live here and nowhere else.

Query parameters are read as text by `parse_listing`, not by Litestar's typed
parameters: a bad value then gets a 400 that names the parameter and says what it
should be, rather than a generic validation message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date
from typing import Any
from urllib.parse import urlencode

from webapp.chat.stored.feedback import FEEDBACK
from webapp.errors import InvalidInput, refuse_nul

LIST_PATH = "/admin/trimmed"
SORTS = (
    "owner",
    "title",
    "configuration",
    "models",
    "trimmed_turns",
    "most_dropped",
    "last_activity",
)
"""The columns a list may be sorted by; anything else is refused, never interpolated."""
TEXT_SORTS = frozenset({"owner", "title", "configuration", "models"})
"""Read A to Z on first click; counts and dates read largest / newest first."""
DEFAULT_SORT = "last_activity"
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 200
MAX_PAGE = 1_000_000
"""Far past any real list; it keeps OFFSET within what both databases take."""


@dataclass(frozen=True, slots=True)
class Listing:
    """One list request: its filters, sort and page, and the links that change them."""

    configuration: str | None = None
    model: str | None = None
    owner: str | None = None
    """A username (any case), a raw owner string, or `embed:<name>`."""
    since: date | None = None
    until: date | None = None
    """`since` and `until` are inclusive UTC days of the last activity."""
    feedback: str | None = None
    """`up` or `down`: conversations with an answer rated so, trimmed or not."""
    sort: str = DEFAULT_SORT
    descending: bool = True
    page: int = 1
    per_page: int = DEFAULT_PER_PAGE

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise InvalidInput(f"cannot sort by {self.sort!r}; choose one of: {', '.join(SORTS)}")
        if self.feedback not in (None, *FEEDBACK):
            raise InvalidInput(f"feedback must be up or down, not {self.feedback!r}")
        _check_range("page", self.page, MAX_PAGE)
        _check_range("per_page", self.per_page, MAX_PER_PAGE)
        if self.since is not None and self.until is not None and self.since > self.until:
            raise InvalidInput(
                f"the date range is empty: since {self.since} is after until {self.until}"
            )

    @property
    def order(self) -> str:
        return "desc" if self.descending else "asc"

    @property
    def filtered(self) -> bool:
        return any(
            (self.configuration, self.model, self.owner, self.since, self.until, self.feedback)
        )

    def params(self) -> dict[str, str]:
        """The query string of this listing, leaving out defaults and empty filters."""
        values: dict[str, Any] = {
            "configuration": self.configuration,
            "model": self.model,
            "owner": self.owner,
            "since": self.since,
            "until": self.until,
            "feedback": self.feedback,
            "sort": self.sort if self.sort != DEFAULT_SORT else None,
            "order": None if self.descending else "asc",
            "page": self.page if self.page != 1 else None,
            "per_page": self.per_page if self.per_page != DEFAULT_PER_PAGE else None,
        }
        return {key: str(value) for key, value in values.items() if value is not None}

    def url(self, path: str = LIST_PATH, **changes: Any) -> str:
        query = urlencode(replace(self, **changes).params())
        return f"{path}?{query}" if query else path

    def sort_url(self, column: str) -> str:
        """The same filters sorted by `column`: the other way round if it is the current
        sort, else in that column's natural order; always from the first page."""
        descending = not self.descending if column == self.sort else column not in TEXT_SORTS
        return self.url(sort=column, descending=descending, page=1)

    def aria_sort(self, column: str) -> str:
        if column != self.sort:
            return "none"
        return "descending" if self.descending else "ascending"


def _check_range(name: str, number: int, most: int) -> None:
    if not 1 <= number <= most:
        raise InvalidInput(f"{name} must be between 1 and {most:,}, not {number}")


def _text(params: Mapping[str, str | None], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    value = refuse_nul(value, name).strip()
    return value or None


def _date(params: Mapping[str, str | None], name: str) -> date | None:
    value = _text(params, name)
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a date as YYYY-MM-DD, not {value!r}") from None


def _whole_number(params: Mapping[str, str | None], name: str, default: int) -> int:
    value = _text(params, name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidInput(f"{name} must be a whole number, not {value!r}") from None


def parse_listing(params: Mapping[str, str | None]) -> Listing:
    """A Listing from query parameters (the page's, the CSV's or the API's); InvalidInput
    (400) names any bad one."""
    order = _text(params, "order")
    if order not in (None, "asc", "desc"):
        raise InvalidInput(f"order must be asc or desc, not {order!r}")
    return Listing(
        configuration=_text(params, "configuration"),
        model=_text(params, "model"),
        owner=_text(params, "owner"),
        since=_date(params, "since"),
        until=_date(params, "until"),
        feedback=_text(params, "feedback"),
        sort=_text(params, "sort") or DEFAULT_SORT,
        descending=(order or "desc") == "desc",
        page=_whole_number(params, "page", 1),
        per_page=_whole_number(params, "per_page", DEFAULT_PER_PAGE),
    )


REVIEW_PER_PAGE = 50
"""Turns of the history one review page shows, unless asked otherwise."""
REVIEW_MAX_PER_PAGE = 200
SPANS_PER_PAGE = 100
"""Stored left-out spans of each send one review page shows: an import may carry 100,000,
and the review reads and draws only a page of them."""


@dataclass(frozen=True, slots=True)
class ReviewPaging:
    """Which part of one conversation the review shows: a page of its turns, and of each
    send's left-out spans a page. `per_page` (and `spans_per_page`) None: all of them (the
    query layer's default, for its callers that want the whole record)."""

    page: int = 1
    per_page: int | None = None
    spans: int = 1
    spans_per_page: int | None = None

    def __post_init__(self) -> None:
        _check_range("page", self.page, MAX_PAGE)
        _check_range("spans", self.spans, MAX_PAGE)
        if self.per_page is not None:
            _check_range("per_page", self.per_page, REVIEW_MAX_PER_PAGE)
        if self.spans_per_page is not None:
            _check_range("spans_per_page", self.spans_per_page, MAX_PAGE)

    def url(self, path: str, **changes: Any) -> str:
        """`path` with this paging's query string (defaults left out), `changes` applied."""
        paging = replace(self, **changes)
        values = {
            "page": paging.page if paging.page != 1 else None,
            "per_page": paging.per_page if paging.per_page != REVIEW_PER_PAGE else None,
            "spans": paging.spans if paging.spans != 1 else None,
        }
        query = urlencode({key: value for key, value in values.items() if value is not None})
        return f"{path}?{query}" if query else path


def parse_review_paging(params: Mapping[str, str | None]) -> ReviewPaging:
    """The review page's paging from its query parameters (`page`, `per_page`, `spans`);
    InvalidInput (400) names any bad one."""
    return ReviewPaging(
        page=_whole_number(params, "page", 1),
        per_page=_whole_number(params, "per_page", REVIEW_PER_PAGE),
        spans=_whole_number(params, "spans", 1),
        spans_per_page=SPANS_PER_PAGE,
    )
