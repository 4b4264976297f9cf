"""The admin review of trimmed conversations, on SQLite and PostgreSQL.

Conversations are made the real way (the conversation service against the fake
upstream, which enforces each model's window), so every trimmed turn in these
tests was trimmed by the bound itself. Expected aggregates are computed here in
plain Python from the whole stored history and compared with what the SQL returns.
The key test holds the review's rebuilt "left out" sets against the requests the
upstream actually received.
"""

from __future__ import annotations

import asyncio
import csv
import io
import shutil
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from litestar.testing import AsyncTestClient
from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from tests.conftest import empty_tables
from tests.dbutil import session_on
from tests.factories import add_user, admin_client, build_service, close_service, service_settings
from tests.upstream import FakeUpstream
from webapp.accounts.guards import admin_only
from webapp.accounts.models import User
from webapp.admin import queries
from webapp.admin.chart import Bar, bar_chart, column_chart, per_day_chart, per_model_chart
from webapp.admin.listing import SORTS, Listing, parse_listing
from webapp.admin.web import AdminController, left_out_spans
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import REPLAYABLE, Conversation, Message, Role
from webapp.db import is_sqlite
from webapp.errors import InvalidInput, NotFound
from webapp.settings import Settings
from webapp.timeutil import as_utc, utcnow

module_loop = pytest.mark.asyncio(loop_scope="module")
"""The conversations are made once per database, on the module's event loop; every
async test that reads them runs on that loop too."""

SVG = "{http://www.w3.org/2000/svg}"
TODAY = utcnow().date()
RATE_LIMITS = ("rate_limit_messages", "embed_rate_limit_messages")


# ---- building conversations the real way ---------------------------------------------------


@dataclass
class World:
    """What the tests made, and what the upstream was sent for each send."""

    chat: ChatJobs
    settings: Settings
    users: dict[str, User]
    ids: dict[str, str] = field(default_factory=dict)
    """Short name -> conversation id."""
    sent: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    """(conversation id, user seq) -> the messages of the last request of that send."""


async def send(
    world: World, upstream: FakeUpstream, owner: str, conversation_id: str, text: str
) -> Message:
    before = len(upstream.requests)
    user, _ = await world.chat.sender.settle(
        await world.chat.sender.send(owner, conversation_id, text)
    )
    requests = upstream.requests[before:]
    assert requests, "every send reaches the upstream"
    world.sent[(conversation_id, user.seq)] = requests[-1]["body"]["messages"]
    return user


async def talk(
    world: World,
    upstream: FakeUpstream,
    name: str,
    owner: str,
    configuration: str,
    *,
    turns: int = 0,
    trimmed: int = 0,
    words: int = 25,
    fail: dict[int, tuple[int, str | None]] | None = None,
    limit: int = 80,
) -> str:
    """Send at least `turns` messages, and on until `trimmed` sends were trimmed: how
    soon the bound trims depends on the estimator, which these tests do not pin down.
    `fail` scripts an upstream error (status, model) before the send of that index."""
    conversation = await world.chat.editor.create(owner, configuration, title=f"{name} talk")
    world.ids[name] = conversation.id
    index = count = 0
    while index < turns or count < trimmed:
        assert index < limit, f"{name}: still {count} trimmed sends after {limit}"
        if fail and index in fail:
            status, model = fail[index]
            upstream.fail_next(status, model=model)
        text = f"{name} message {index}: " + "lorem ipsum " * words
        user = await send(world, upstream, owner, conversation.id, text)
        count += bool(user.dropped_turns)
        index += 1
    return conversation.id


async def set_activity(chat: ChatJobs, conversation_id: str, when: datetime) -> None:
    """Move a conversation (and its messages) to another time, as if it happened then."""
    async with session_on(chat.db, begin=True) as session:
        await session.exec(
            update(Conversation)
            .where(col(Conversation.id) == conversation_id)
            .values(updated_at=when, created_at=when)
        )
        await session.exec(
            update(Message)
            .where(col(Message.conversation_id) == conversation_id)
            .values(created_at=when, updated_at=when)
        )


FIVE_DAYS_AGO_LATE = datetime.combine(TODAY - timedelta(days=5), time(23, 30), tzinfo=UTC)
TWO_DAYS_AGO_EARLY = datetime.combine(TODAY - timedelta(days=2), time(0, 30), tzinfo=UTC)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def admin_database_url(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
) -> str:
    """Like conftest's `database_url` (both databases, an empty migrated schema each),
    but once per module: the conversations below take seconds to make, and every
    test here only reads them."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("admin") / "webapp.db"
        shutil.copy(sqlite_template, path)
        return f"sqlite+aiosqlite:///{path}"
    url: str = request.getfixturevalue("postgres_url")
    asyncio.run(empty_tables(url))
    return url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(
    admin_database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    """Five conversations; four of them trimmed at least once.

    - long (alice, small): until 14 sends were trimmed; the 4th answer failed (kept,
      never replayed); long enough that the loader itself leaves turns unread.
    - embed (an embed visitor of "docs", small): until 3 trimmed sends; five days
      ago, 23:30 UTC.
    - mixed (bob, small-then-medium): until 3 trimmed sends, then one on which small
      fails, so medium serves it: two models served. Two days ago, 00:30 UTC.
    - big (alice, cheapest-4k, i.e. medium): long messages until 2 trimmed sends.
    - short (bob, small): 3 turns, never trimmed.
    """
    # Dozens of messages a second: no rate limit may refuse them.
    unlimited: dict[str, Any] = {
        name: 1_000_000 for name in RATE_LIMITS if name in Settings.model_fields
    }
    with FakeUpstream() as upstream:
        settings = service_settings(
            admin_database_url, tmp_path_factory.mktemp("catalog"), upstream, **unlimited
        )
        chat = await build_service(settings)
        users = {
            "alice": await add_user(chat, "Alice"),
            "bob": await add_user(chat, "bob"),
            "root": await add_user(chat, "root", admin=True),
        }
        world = World(chat, settings, users)
        alice, bob = f"user:{users['alice'].id}", f"user:{users['bob'].id}"
        try:
            await talk(world, upstream, "long", alice, "small", trimmed=14, fail={3: (503, None)})
            await talk(world, upstream, "embed", "embed:docs:visitor-1", "small", trimmed=3)
            mixed = await talk(world, upstream, "mixed", bob, "small-then-medium", trimmed=3)
            upstream.fail_next(429, model="small")
            await send(world, upstream, bob, mixed, "mixed: now small fails and medium serves")
            await talk(world, upstream, "big", alice, "cheapest-4k", trimmed=2, words=150)
            await talk(world, upstream, "short", bob, "small", turns=3)
            await set_activity(chat, world.ids["embed"], FIVE_DAYS_AGO_LATE)
            await set_activity(chat, world.ids["mixed"], TWO_DAYS_AGO_EARLY)
            yield world
        finally:
            await close_service(chat)


# ---- the oracle: the same facts, computed in Python from everything stored -----------------


@dataclass
class Expected:
    conversation: Conversation
    owner_name: str
    models: list[str]
    trimmed_turns: int
    most_dropped: int


async def everything(chat: ChatJobs) -> tuple[list[Conversation], list[Message]]:
    async with session_on(chat.db) as session:
        conversations = list((await session.exec(select(Conversation))).all())
        messages = list((await session.exec(select(Message).order_by(col(Message.seq)))).all())
    return conversations, messages


async def expected_rows(world: World) -> dict[str, Expected]:
    conversations, messages = await everything(world.chat)
    names = {f"user:{u.id}": u.username for u in world.users.values()}
    expected = {}
    for conversation in conversations:
        mine = [m for m in messages if m.conversation_id == conversation.id]
        dropped = [m.dropped_turns for m in mine if m.role == Role.USER and m.dropped_turns]
        if not dropped:
            continue
        owner = conversation.owner
        expected[conversation.id] = Expected(
            conversation=conversation,
            owner_name=names.get(owner) or f"embed visitor ({owner.split(':')[1]})",
            models=sorted({m.model for m in mine if m.role == Role.ASSISTANT and m.model}),
            trimmed_turns=len(dropped),
            most_dropped=max(dropped),
        )
    return expected


async def listing(
    world: World, *, everything: bool = False, **kwargs: Any
) -> queries.Page[queries.TrimmedRow]:
    request = Listing(**kwargs)
    return await world.chat.db.read(
        lambda session: queries.trimmed_conversations(session, request, everything=everything)
    )


def sqlmodel_of(session: OrmSession) -> Session:
    """The sync session SQLModel's AsyncSession runs its work on (typed as SQLAlchemy's)."""
    assert isinstance(session, Session)
    return session


def ids(page: queries.Page[queries.TrimmedRow]) -> list[str]:
    return [row.conversation_id for row in page.items]


# ---- the list ------------------------------------------------------------------------------


@module_loop
async def test_the_list_holds_exactly_the_trimmed_conversations(world: World) -> None:
    expected = await expected_rows(world)
    assert set(expected) == {world.ids[n] for n in ("long", "embed", "mixed", "big")}
    page = await listing(world)
    assert page.total == 4 and page.pages == 1 and page.page == 1
    assert world.ids["short"] not in ids(page), "a conversation that never trimmed is absent"
    for row in page.items:
        want = expected[row.conversation_id]
        assert row.owner == want.conversation.owner
        assert row.owner_name == want.owner_name
        assert row.title == want.conversation.title
        assert row.configuration == want.conversation.configuration
        assert row.models == want.models
        assert row.trimmed_turns == want.trimmed_turns
        assert row.most_dropped == want.most_dropped
        assert row.last_activity == as_utc(want.conversation.updated_at)
    by_name = {
        name: next(r for r in page.items if r.conversation_id == world.ids[name])
        for name in ("long", "embed", "mixed", "big")
    }
    assert by_name["long"].owner_name == "Alice"
    assert by_name["embed"].owner_name == "embed visitor (docs)"
    assert by_name["mixed"].models == ["medium", "small"]
    assert by_name["big"].models == ["medium"]
    assert by_name["embed"].last_activity == FIVE_DAYS_AGO_LATE
    # The default order is the newest activity first.
    assert ids(page)[-2:] == [world.ids["mixed"], world.ids["embed"]]


@module_loop
async def test_each_filter(world: World) -> None:
    async def names(**kwargs: Any) -> set[str]:
        found = set(ids(await listing(world, **kwargs)))
        return {name for name, cid in world.ids.items() if cid in found}

    assert await names(configuration="small") == {"long", "embed"}
    assert await names(configuration="cheapest-4k") == {"big"}
    assert await names(configuration="nope") == set()
    assert await names(model="medium") == {"mixed", "big"}
    assert await names(model="small") == {"long", "embed", "mixed"}
    assert await names(owner="alice") == {"long", "big"}, "usernames match in any case"
    assert await names(owner="ALICE") == {"long", "big"}
    assert await names(owner=f"user:{world.users['bob'].id}") == {"mixed"}
    assert await names(owner="embed:docs:visitor-1") == {"embed"}
    assert await names(owner="embed:docs") == {"embed"}, "every visitor of an embed"
    assert await names(owner="embed:doc") == set()
    assert await names(owner="embed:d%") == set(), "LIKE wildcards are taken literally"
    five, two = TODAY - timedelta(days=5), TODAY - timedelta(days=2)
    assert await names(since=five, until=five) == {"embed"}, "days are inclusive, in UTC"
    assert await names(since=two, until=two) == {"mixed"}
    assert await names(since=five + timedelta(days=1)) == {"long", "mixed", "big"}
    assert await names(until=two - timedelta(days=1)) == {"embed"}
    assert await names(since=TODAY) == {"long", "big"}
    assert await names(configuration="small", owner="alice", since=TODAY) == {"long"}
    with pytest.raises(InvalidInput, match="is after"):
        await listing(world, since=TODAY, until=five)


SORT_KEYS: dict[str, Callable[[queries.TrimmedRow], Any]] = {
    "owner": lambda r: r.owner_name.lower(),
    "title": lambda r: r.title.lower(),
    "configuration": lambda r: r.configuration,
    "models": lambda r: r.models[0] if r.models else "",
    "trimmed_turns": lambda r: r.trimmed_turns,
    "most_dropped": lambda r: r.most_dropped,
    "last_activity": lambda r: r.last_activity,
}


@module_loop
async def test_each_sort_and_the_pages(world: World) -> None:
    assert set(SORT_KEYS) == set(SORTS)
    rows = (await listing(world)).items
    for sort, key in SORT_KEYS.items():
        for descending in (False, True):
            # Ties go by conversation id, ascending, whatever the direction.
            want = sorted(rows, key=lambda r: r.conversation_id)
            want.sort(key=key, reverse=descending)
            got = await listing(world, sort=sort, descending=descending)
            assert ids(got) == [r.conversation_id for r in want], (sort, descending)
    owners = [r.owner_name for r in (await listing(world, sort="owner", descending=False)).items]
    assert owners[:2] == ["Alice", "Alice"] and owners[-1] == "embed visitor (docs)"

    everything = ids(await listing(world, sort="trimmed_turns"))
    first = await listing(world, sort="trimmed_turns", per_page=3)
    second = await listing(world, sort="trimmed_turns", per_page=3, page=2)
    third = await listing(world, sort="trimmed_turns", per_page=3, page=3)
    assert (first.total, first.pages, second.total, second.pages) == (4, 2, 4, 2)
    assert ids(first) + ids(second) == everything
    assert first.has_next and not first.has_previous
    assert second.has_previous and not second.has_next
    assert third.items == [] and third.total == 4

    with pytest.raises(InvalidInput, match="cannot sort by 'title; drop'"):
        await listing(world, sort="title; drop")
    with pytest.raises(InvalidInput, match="page must be between 1 and 1,000,000, not 0"):
        await listing(world, page=0)
    with pytest.raises(InvalidInput, match="per_page must be between 1 and 200, not 0"):
        await listing(world, per_page=0)
    with pytest.raises(InvalidInput, match="per_page must be between 1 and 200, not 201"):
        await listing(world, per_page=201)


# ---- the overview --------------------------------------------------------------------------


@module_loop
async def test_trimmed_turns_per_day_and_per_model(world: World, admin_database_url: str) -> None:
    _, messages = await everything(world.chat)
    trimmed = [m for m in messages if m.role == Role.USER and m.dropped_turns]
    want_days = Counter(as_utc(m.created_at).date() for m in trimmed)
    want_models = Counter(m.fit_model for m in trimmed)
    assert set(want_models) == {"small", "medium"}
    assert TODAY - timedelta(days=5) in want_days and TODAY - timedelta(days=2) in want_days

    # On PostgreSQL, a session in Tokyo: 23:30 UTC is already tomorrow there, and the
    # count must still land on the UTC day.
    connect_args = (
        {} if is_sqlite(admin_database_url) else {"server_settings": {"timezone": "Asia/Tokyo"}}
    )
    engine = create_async_engine(admin_database_url, connect_args=connect_args)
    try:
        async with AsyncSession(engine) as session:
            days = await session.run_sync(lambda s: queries.trimmed_per_day(sqlmodel_of(s), 30))
            week = await session.run_sync(
                lambda s: queries.trimmed_per_day(
                    sqlmodel_of(s), 7, today=TODAY - timedelta(days=1)
                )
            )
            models = await session.run_sync(lambda s: queries.trimmed_per_model(sqlmodel_of(s)))
    finally:
        await engine.dispose()
    assert len(days) == 30 and days[0].day == TODAY - timedelta(days=29) and days[-1].day == TODAY
    assert {d.day: d.trimmed_turns for d in days if d.trimmed_turns} == dict(want_days)
    assert [d.day for d in week] == [TODAY - timedelta(days=7 - i) for i in range(7)]
    assert sum(d.trimmed_turns for d in week) == sum(
        n for day, n in want_days.items() if day < TODAY
    )
    assert {m.model: m.trimmed_turns for m in models} == dict(want_models)
    assert [m.trimmed_turns for m in models] == sorted(want_models.values(), reverse=True)

    # The charts: well-formed SVG with a title and a description, the labels as text,
    # and every bar's number said in its own title.
    counts = [str(n) for n in (*want_days.values(), *want_models.values())]
    for svg, labels, spoken in (
        (
            per_day_chart(days),
            [TODAY.strftime("%m-%d"), *counts[: len(want_days)]],
            [f"{day.isoformat()}: {n} trimmed turns" for day, n in want_days.items()],
        ),
        (
            per_model_chart(models),
            ["small", "medium", *counts[len(want_days) :]],
            [f"{model}: {n} trimmed turns" for model, n in want_models.items()],
        ),
    ):
        root = ET.fromstring(str(svg))
        assert root.tag == f"{SVG}svg" and root.get("role") == "img"
        assert root.find(f"{SVG}title") is not None and root.find(f"{SVG}desc") is not None
        texts = [t.text for t in root.iter(f"{SVG}text")]
        for label in labels:
            assert label in texts
        bars = [t.text for t in root.iter(f"{SVG}title")]
        for words in spoken:
            assert words in bars
        assert "style" not in str(svg)


def test_charts_escape_labels_and_stay_well_formed() -> None:
    nasty = 'gpt<script>alert("x")</script>&\x01\'"'
    for svg in (
        bar_chart([Bar(nasty, 3), Bar("ok", 1)], ident='a"b', title=nasty, unit="turns"),
        column_chart([Bar(nasty, 0), Bar("b", 2)], ident="c", title="t", unit="turns"),
        bar_chart([], ident="empty", title="Nothing", unit="turns"),
        column_chart([], ident="none", title="Nothing", unit="turns"),
    ):
        text = str(svg)
        root = ET.fromstring(text)  # well-formed, whatever the labels
        assert "<script" not in text and "style" not in text
        assert root.get("aria-labelledby")
    root = ET.fromstring(str(bar_chart([Bar(nasty, 3)], ident="x", title="t", unit="turns")))
    label = next(root.iter(f"{SVG}text")).text or ""
    assert label.startswith("gpt<script>"), "escaped on the wire, the same text when read"
    desc = root.find(f"{SVG}desc")
    assert desc is not None and "3 turns in all" in (desc.text or "")


def test_a_chart_with_nothing_to_draw_says_so() -> None:
    empty = [
        bar_chart([], ident="a", title="t", unit="turns"),
        column_chart([Bar("a", 0)], ident="b", title="t", unit="turns"),
    ]
    drawn = [
        bar_chart([Bar("a", 0)], ident="c", title="t", unit="turns"),
        column_chart([Bar("a", 1)], ident="d", title="t", unit="turns"),
    ]
    for svg in empty:
        [note] = [
            t for t in ET.fromstring(str(svg)).iter(f"{SVG}text") if t.get("class") == "chart-empty"
        ]
        assert note.text == "No turns" and note.get("text-anchor") == "middle"
    for svg in drawn:
        assert 'class="chart-empty"' not in str(svg) and str(svg).endswith("</svg>")


# ---- the export ----------------------------------------------------------------------------


@module_loop
async def test_csv_has_a_header_and_every_row(world: World) -> None:
    page = await listing(world, sort="title", descending=False, everything=True)
    assert page.total == len(page.items) == 4 and page.pages == 1
    parsed = list(csv.reader(io.StringIO(queries.to_csv(page.items))))
    assert parsed[0] == list(queries.CSV_COLUMNS)
    assert [r[0] for r in parsed[1:]] == ids(page)
    for line, row in zip(parsed[1:], page.items, strict=True):
        assert line[1:5] == [row.title, row.owner, row.owner_name, row.configuration]
        assert line[5] == " ".join(row.models)
        assert [int(line[6]), int(line[7])] == [row.trimmed_turns, row.most_dropped]
        assert datetime.fromisoformat(line[8]) == row.last_activity


def test_csv_quotes_and_neutralises_formulas() -> None:
    row = queries.TrimmedRow(
        conversation_id="abc",
        title='=HYPERLINK("http://evil"), "quoted"\nand a new line',
        owner="user:1",
        owner_name="@admin",
        configuration="small",
        models=["a", "b"],
        trimmed_turns=2,
        most_dropped=5,
        last_activity=datetime(2024, 3, 1, 12, 0, tzinfo=UTC),
    )
    _, line = list(csv.reader(io.StringIO(queries.to_csv([row]))))
    assert line == [
        "abc",
        '\'=HYPERLINK("http://evil"), "quoted"\nand a new line',
        "user:1",
        "'@admin",
        "small",
        "a b",
        "2",
        "5",
        "2024-03-01T12:00:00Z",
    ]


@pytest.mark.parametrize("start", [";", "=", "+", "-", "@", "\t", "\r", "\n"])
def test_csv_neutralises_every_formula_start(start: str) -> None:
    row = queries.TrimmedRow(
        conversation_id="abc",
        title=f"{start}cmd|' /C calc'!A0",
        owner="user:1",
        owner_name="alice",
        configuration="small",
        models=[],
        trimmed_turns=1,
        most_dropped=1,
        last_activity=datetime(2024, 3, 1, 12, 0, tzinfo=UTC),
    )
    _, line = list(csv.reader(io.StringIO(queries.to_csv([row]))))
    assert line[1] == f"'{start}cmd|' /C calc'!A0"


def test_the_owner_filter_is_in_the_api_schema() -> None:
    """The app-wide `owner` dependency once shadowed the query parameter of that name."""
    from webapp.app import create_app

    schema = create_app().openapi_schema.to_schema()
    parameters = schema["paths"]["/api/admin/trimmed"]["get"]["parameters"]
    owner = [p for p in parameters if p["name"] == "owner"]
    assert owner and owner[0]["in"] == "query"


# ---- the review: the rebuilt left-out sets are what the model was not sent ----------------


def replayable_before(messages: list[Message], seq: int) -> set[int]:
    """Independently of webapp.chat.stored.history: turns whose answer would be replayed."""
    by_seq = {m.seq: m for m in messages}
    return {
        m.seq
        for m in messages
        if m.role == Role.USER
        and m.seq < seq
        and (answer := by_seq.get(m.seq + 1)) is not None
        and answer.role == Role.ASSISTANT
        and answer.status in REPLAYABLE
        and answer.content != ""
    }


@module_loop
async def test_the_review_rebuilds_exactly_what_each_send_left_out(world: World) -> None:
    checked = 0
    for name in ("long", "embed", "mixed", "big", "short"):
        conversation_id = world.ids[name]
        review = await world.chat.db.read(queries.review, conversation_id)
        messages = review.messages
        assert [m.seq for m in messages] == list(range(1, len(messages) + 1)), "whole, in order"
        seq_of = {m.content: m.seq for m in messages if m.role == Role.USER}
        trimmed_rows = [m for m in messages if m.role == Role.USER and m.dropped_turns]
        assert [t.seq for t in review.trimmed] == [m.seq for m in trimmed_rows]
        for turn, row in zip(review.trimmed, trimmed_rows, strict=True):
            sent = world.sent[(conversation_id, turn.seq)]
            assert sent[-1]["content"] == row.content, "the newest message is always sent"
            sent_seqs = {seq_of[m["content"]] for m in sent[:-1] if m["role"] == Role.USER}
            replayable = replayable_before(messages, turn.seq)
            assert sent_seqs <= replayable
            assert min(replayable) in sent_seqs, "the head is always sent"
            inside = set(review.left_out(turn))
            assert inside == replayable - sent_seqs, (name, turn.seq)
            assert len(inside) == turn.dropped_turns == row.dropped_turns
            assert turn.fit == queries.FitFacts(
                row.fit_model,
                row.fit_window,
                row.fit_budget,
                row.fit_estimated_tokens,
                row.fit_reserve,
                row.fit_overflow_at_floor,
            )
            checked += 1
        if name == "short":
            assert review.trimmed == []
    assert checked >= 10

    long = await world.chat.db.read(queries.review, world.ids["long"])
    # The failed 4th turn is on record but was never replayed, so never "left out", though
    # stored spans run over it.
    failed = next(m for m in long.messages if m.role == Role.ASSISTANT and m.status == "failed")
    assert long.turn_numbers[failed.seq - 1] == 4
    assert all(failed.seq - 1 not in long.left_out(t) for t in long.trimmed)
    assert any(a <= failed.seq <= b for t in long.trimmed for a, b in t.spans)
    assert long.owner_name == "Alice" and long.models == ["small"]
    # Some send of the long conversation dropped more than the loader ever read.
    assert max(t.dropped_turns for t in long.trimmed) > 10
    # Who left each turn out, against a brute-force count.
    left_out_by = long.left_out_by()
    assert left_out_by
    for seq in long.turn_numbers:
        senders = [t.seq for t in long.trimmed if seq in set(long.left_out(t))]
        if not senders:
            assert seq not in left_out_by
            continue
        first, last = long.turn_numbers[senders[0]], long.turn_numbers[senders[-1]]
        assert left_out_by[seq] == queries.LeftOutBy(len(senders), first, last)
    # As runs of turn numbers, a left-out set is broken only by the never-sent turn 4.
    numbers = long.turn_numbers
    broken = 0
    for turn in long.trimmed:
        runs = left_out_spans(long, turn)
        covered = {n for a, b in runs for n in range(a, b + 1)}
        assert covered == {numbers[s] for s in long.left_out(turn)}
        broken += len(runs) > 1
    assert broken and all(
        4 not in range(a, b + 1) for t in long.trimmed for a, b in left_out_spans(long, t)
    )


def test_who_left_a_turn_out_matches_brute_force_on_overlapping_spans() -> None:
    conversation = Conversation(owner="user:1", configuration="c")
    users = [
        Message(conversation_id=conversation.id, seq=2 * n + 1, role="user") for n in range(12)
    ]
    spans = {9: ((3, 6),), 13: ((3, 8),), 17: ((5, 6), (9, 10)), 21: ((7, 14),), 23: ((19, 20),)}
    review = queries.Review(
        conversation=conversation,
        owner_name="x",
        messages=users,
        trimmed=[
            queries.TrimmedTurn(seq, 1, spans[seq], queries.FitFacts.of(users[0]))
            for seq in sorted(spans)
        ],
        models=[],
        turn_numbers={m.seq: i + 1 for i, m in enumerate(users)},
        sendable=[m.seq for m in users],
    )
    by = review.left_out_by()
    for user in users:
        senders = [t.seq for t in review.trimmed if user.seq in review.left_out(t)]
        if senders:
            first, last = review.turn_numbers[senders[0]], review.turn_numbers[senders[-1]]
            assert by[user.seq] == queries.LeftOutBy(len(senders), first, last)
        else:
            assert user.seq not in by


@module_loop
async def test_review_of_an_unknown_conversation_is_not_found(world: World) -> None:
    with pytest.raises(NotFound):
        await world.chat.db.read(queries.review, "no-such-id")


# ---- parsing and the web layer ---------------------------------------------------------------


def test_query_parameters_are_parsed_or_refused_clearly() -> None:
    assert parse_listing({}) == Listing()
    parsed = parse_listing(
        {
            "configuration": " small ",
            "model": "",
            "since": "2024-03-01",
            "sort": "owner",
            "order": "asc",
            "page": "2",
            "per_page": "10",
        }
    )
    assert parsed == Listing(
        configuration="small",
        since=date(2024, 3, 1),
        sort="owner",
        descending=False,
        page=2,
        per_page=10,
    )
    assert parsed.url() == (
        "/admin/trimmed?configuration=small&since=2024-03-01&sort=owner&order=asc"
        "&page=2&per_page=10"
    )
    assert "order=asc" not in parsed.sort_url("owner"), "the current column flips"
    assert "&page=" not in parsed.sort_url("owner"), "a new sort starts at page 1"
    assert "order=asc" not in parsed.sort_url("trimmed_turns"), "counts start largest first"
    assert "order=asc" in Listing().sort_url("title"), "text starts A to Z"
    for params, message in (
        ({"since": "yesterday"}, "since must be a date"),
        ({"until": "2024-02-30"}, "until must be a date"),
        ({"sort": "password_hash"}, "cannot sort by 'password_hash'"),
        ({"order": "up"}, "order must be asc or desc"),
        ({"page": "0"}, "page must be between 1"),
        ({"page": "two"}, "page must be a whole number"),
        ({"per_page": "100000"}, "per_page must be between 1 and 200"),
        ({"since": "2024-03-02", "until": "2024-03-01"}, "the date range is empty"),
    ):
        with pytest.raises(InvalidInput, match=message):
            parse_listing(params)


@pytest_asyncio.fixture(loop_scope="module")
async def client(world: World) -> AsyncIterator[AsyncTestClient]:
    users = {"root": world.users["root"], "alice": world.users["alice"]}
    async with admin_client(world.settings, users) as test_client:
        yield test_client


ROUTES = ("/admin/trimmed", "/admin/trimmed.csv", "/api/admin/trimmed", "/admin/c/{id}")


@module_loop
async def test_only_admins_get_in(client: AsyncTestClient, world: World) -> None:
    assert admin_only in AdminController.guards
    for route in ROUTES:
        url = route.format(id=world.ids["long"])
        for who in ("alice", "", "stranger"):
            response = await client.get(url, headers={"x-test-user": who})
            assert response.status_code == 403, (url, who)
            assert world.ids["long"] not in response.text
        response = await client.get(url, headers={"x-test-user": "root"})
        assert response.status_code == 200, (url, response.text)
    forbidden = await client.get("/api/admin/trimmed", headers={"x-test-user": "alice"})
    assert forbidden.json()["detail"] == "this page is for admins only"


@module_loop
async def test_the_list_page_json_and_csv(client: AsyncTestClient, world: World) -> None:
    admin = {"x-test-user": "root"}
    page = await client.get("/admin/trimmed?sort=trimmed_turns&per_page=2", headers=admin)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    assert "style=" not in html and "<style" not in html
    assert 'id="trimmed-per-day"' in html and 'id="trimmed-per-model"' in html
    assert "Page 1 of 2" in html and 'rel="next"' in html
    assert "/admin/trimmed?sort=trimmed_turns&amp;page=2&amp;per_page=2" in html
    assert 'href="/admin/trimmed.csv?sort=trimmed_turns&amp;per_page=2"' in html
    assert 'aria-sort="descending"' in html
    assert world.ids["short"] not in html
    assert html.count("data-conversation-id=") == 2

    api = await client.get("/api/admin/trimmed?model=medium&sort=title&order=asc", headers=admin)
    body = api.json()
    assert (body["total"], body["pages"], body["sort"], body["order"]) == (2, 1, "title", "asc")
    assert [r["conversation_id"] for r in body["rows"]] == [world.ids["big"], world.ids["mixed"]]
    assert set(body["rows"][0]) == {
        "conversation_id",
        "title",
        "owner",
        "owner_name",
        "configuration",
        "models",
        "trimmed_turns",
        "most_dropped",
        "last_activity",
        "review_url",
    }
    assert body["rows"][1]["models"] == ["medium", "small"]
    assert body["rows"][0]["last_activity"].endswith("Z")

    by_owner = await client.get("/api/admin/trimmed?owner=BOB", headers=admin)
    assert [r["conversation_id"] for r in by_owner.json()["rows"]] == [world.ids["mixed"]]
    nobody = await client.get("/api/admin/trimmed?owner=nobody", headers=admin)
    assert nobody.json()["total"] == 0

    export = await client.get("/admin/trimmed.csv?per_page=1", headers=admin)
    assert export.headers["content-type"] == "text/csv; charset=utf-8"
    assert "attachment" in export.headers["content-disposition"]
    lines = list(csv.reader(io.StringIO(export.text)))
    assert lines[0] == list(queries.CSV_COLUMNS) and len(lines) == 5, "every row, not a page"

    for url, message in (
        ("/admin/trimmed?since=last+week", "since must be a date"),
        ("/admin/trimmed?sort=nope", "cannot sort by"),
        ("/api/admin/trimmed?page=0", "page must be between 1"),
        ("/api/admin/trimmed?until=2024-13-01", "until must be a date"),
        ("/admin/trimmed.csv?order=sideways", "order must be asc or desc"),
        # One cap for the page, the CSV and the API: the query layer has no other.
        ("/admin/trimmed?per_page=201", "per_page must be between 1 and 200, not 201"),
        ("/api/admin/trimmed?per_page=500", "per_page must be between 1 and 200, not 500"),
        ("/admin/trimmed.csv?per_page=201", "per_page must be between 1 and 200, not 201"),
    ):
        response = await client.get(url, headers=admin)
        assert response.status_code == 400, url
        assert message in response.text, url
    assert (await client.get("/api/admin/trimmed?page=0", headers=admin)).json()["detail"]


@module_loop
async def test_the_review_page_marks_trims_and_what_they_left_out(
    client: AsyncTestClient, world: World
) -> None:
    admin = {"x-test-user": "root"}
    conversation_id = world.ids["long"]
    response = await client.get(f"/admin/c/{conversation_id}", headers=admin)
    assert response.status_code == 200
    html = response.text
    assert "style=" not in html and "<style" not in html
    review = await world.chat.db.read(queries.review, conversation_id)
    for message in review.messages:
        assert f'data-message-id="{message.id}"' in html, "the whole history is shown"
    numbers = review.turn_numbers
    for turn in review.trimmed:
        assert f'data-dropped-turns="{turn.dropped_turns}"' in html
        marker = html.split(f'data-seq="{turn.seq}"', 1)[1].split("</dl>", 1)[0]
        inside = review.left_out(turn)
        first, last = numbers[inside[0]], numbers[inside[-1]]
        assert f'href="#turn-{first}">#{first}</a>' in marker
        assert f'href="#turn-{last}">#{last}</a>' in marker
    for seq, by in review.left_out_by().items():
        section = html.split(f'id="turn-{numbers[seq]}"', 1)[1].split("</h3>", 1)[0]
        assert "review-left-out" in html.split(f'id="turn-{numbers[seq]}"', 1)[0][-200:]
        assert "left out by" in section
        assert f"#{by.first}</a>" in section
        if by.count == 1:
            assert "left out by turn <a" in section
    for number in set(numbers.values()) - {numbers[s] for s in review.left_out_by()}:
        section = html.split(f'id="turn-{number}"', 1)[1].split("</h3>", 1)[0]
        assert "left out by" not in section
    assert "Overflow at the floor" in html and "Budget for the prompt" in html
    assert "Retry" not in html, "the review is read-only"

    missing = await client.get("/admin/c/does-not-exist", headers=admin)
    assert missing.status_code == 404
