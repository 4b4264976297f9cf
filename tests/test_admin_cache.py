"""The admin review's prompt cache figures, per model and UTC day, on SQLite and PostgreSQL.

The rows are seeded with known token counts (not made through the service), so every
share below is exact: the sum of cached tokens over the sum of prompt tokens of the
answers whose engine reported its cache. Answers without a report are counted apart, as
unknown: never as 0%.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session as OrmSession
from sqlmodel import Session
from sqlmodel.ext.asyncio.session import AsyncSession

from tests.catalogs import CLOSED_PORT_URL
from tests.dbutil import session_on
from tests.factories import admin_client, settings_for
from webapp import cli
from webapp.accounts.models import User
from webapp.admin import queries
from webapp.admin.queries import UNKNOWN_MODEL, CacheDay
from webapp.admin.web import CHART_DAYS
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.db import Database, is_sqlite
from webapp.settings import Settings
from webapp.timeutil import utcnow

TODAY = utcnow().date()
OLDER = TODAY - timedelta(days=3)
NEWER = TODAY - timedelta(days=1)
LATE = time(23, 30)
"""23:30 UTC: already the next day in Tokyo, so a session there must not move the row."""
EARLY = time(0, 30)


@dataclass(frozen=True)
class Answer:
    model: str | None
    prompt: int | None
    cached: int | None
    status: Status = Status.COMPLETE
    evaluated: int | None = None
    written: int | None = None


@dataclass(frozen=True)
class UserSend:
    fit_model: str | None
    cut_moved: bool | None
    cleared: bool = False
    """The send carried older tool results as stubs (`fit_cleared`)."""


SEEDED: dict[tuple[date, time], list[Answer | UserSend]] = {
    (OLDER, LATE): [
        UserSend("alpha", cut_moved=True),
        Answer("alpha", 1000, 800),
        UserSend("alpha", cut_moved=False),
        Answer("alpha", 1000, 0),  # a report of nothing cached: 0, not unknown
        UserSend("alpha", cut_moved=True),
        Answer("alpha", 2000, None),  # no report: unknown, outside the share
        UserSend("beta", cut_moved=None),  # sent before sends said whether the cut moved
        Answer("beta", 700, None),
        UserSend("beta", cut_moved=None),
        Answer("beta", 900, None),
        UserSend(None, cut_moved=True),  # a send whose model was never known
        UserSend("large", cut_moved=False),
        Answer("large", 300, None),  # an engine that never reports its cache
    ],
    (NEWER, EARLY): [
        UserSend("alpha", cut_moved=False),
        Answer("alpha", 400, 300, evaluated=100),
        UserSend("alpha", cut_moved=False),
        Answer("alpha", 600, 450, evaluated=150, written=20),
        UserSend("beta", cut_moved=True, cleared=True),
        Answer("beta", 500, 125),
        UserSend("beta", cut_moved=False),
        Answer("beta", None, None, Status.FAILED),  # failed before a model spoke
        UserSend("beta", cut_moved=False),
        Answer("beta", 300, 300, Status.FAILED),  # a failed answer is no answer
    ],
    (TODAY - timedelta(days=CHART_DAYS), time(12)): [  # a day before the window
        UserSend("alpha", cut_moved=True),
        Answer("alpha", 100, 100),
    ],
}

WANT = [
    CacheDay(NEWER, "alpha", 2, 0, 1000, 750, 0, evaluated_tokens=250, cache_write_tokens=20),
    CacheDay(NEWER, "beta", 1, 0, 500, 125, 1, cleared=1),
    CacheDay(OLDER, UNKNOWN_MODEL, 0, 0, 0, 0, 1),
    CacheDay(OLDER, "alpha", 2, 1, 2000, 800, 2),
    CacheDay(OLDER, "beta", 0, 2, 0, 0, 0),
    CacheDay(OLDER, "large", 0, 1, 0, 0, 0),
]
"""Newest day first, then by model: the exact figures of SEEDED."""


def seeded_rows(conversation_id: str) -> list[Message]:
    rows = []
    for seq, (when, row) in enumerate(
        (
            (datetime.combine(day, at, tzinfo=UTC), row)
            for (day, at), rows in SEEDED.items()
            for row in rows
        ),
        start=1,
    ):
        common: dict[str, Any] = {
            "conversation_id": conversation_id,
            "seq": seq,
            "content": f"row {seq}",
            "created_at": when,
            "updated_at": when,
        }
        if isinstance(row, Answer):
            rows.append(
                Message(
                    role=Role.ASSISTANT,
                    status=row.status,
                    model=row.model,
                    prompt_tokens=row.prompt,
                    completion_tokens=10 if row.prompt is not None else None,
                    cached_tokens=row.cached,
                    evaluated_tokens=row.evaluated,
                    cache_write_tokens=row.written,
                    **common,
                )
            )
        else:
            rows.append(
                Message(
                    role=Role.USER,
                    dropped_turns=0,
                    fit_model=row.fit_model,
                    fit_cut_moved=row.cut_moved,
                    fit_cleared=(
                        [{"first_seq": 1, "last_seq": 1, "tokens": 900}] if row.cleared else None
                    ),
                    **common,
                )
            )
    return rows


@dataclass
class Seeded:
    url: str
    settings: Settings
    users: dict[str, User]


@pytest.fixture
async def seeded(database_url: str, tmp_path: Path) -> AsyncIterator[Seeded]:
    db = Database(database_url)
    users = {
        "root": User(username="root", username_key="root", password_hash="x", is_admin=True),
        "alice": User(username="alice", username_key="alice", password_hash="x"),
    }
    conversation = Conversation(
        owner="embed:docs:visitor-1", embed_name="docs", visitor="visitor-1", configuration="small"
    )
    try:
        async with session_on(db, begin=True) as session:
            session.add_all([*users.values(), conversation])
        async with session_on(db, begin=True) as session:
            session.add_all(seeded_rows(conversation.id))
    finally:
        await db.dispose()
    yield Seeded(database_url, settings_for(database_url, tmp_path, _Nowhere()), users)


class _Nowhere:
    """An upstream nobody calls: these pages only read the database."""

    base_url = CLOSED_PORT_URL


def sqlmodel_of(session: OrmSession) -> Session:
    assert isinstance(session, Session)
    return session


async def read_cache(url: str, **kwargs: Any) -> list[CacheDay]:
    """The query on a session of its own; on PostgreSQL, one in Tokyo, where 23:30 UTC is
    already tomorrow: the rows must still land on their UTC day."""
    connect_args = {} if is_sqlite(url) else {"server_settings": {"timezone": "Asia/Tokyo"}}
    engine = create_async_engine(url, connect_args=connect_args)
    try:
        async with AsyncSession(engine) as session:
            return await session.run_sync(
                lambda s: queries.prompt_cache_per_model_day(sqlmodel_of(s), **kwargs)
            )
    finally:
        await engine.dispose()


async def test_the_share_per_model_and_day_is_exact(seeded: Seeded) -> None:
    rows = await read_cache(seeded.url, days=CHART_DAYS)
    assert rows == WANT
    shares = {(row.day, row.model): row.share for row in rows}
    assert shares == {
        (NEWER, "alpha"): 0.75,
        (NEWER, "beta"): 0.25,
        (OLDER, UNKNOWN_MODEL): None,
        (OLDER, "alpha"): 0.4,
        (OLDER, "beta"): None,
        (OLDER, "large"): None,
    }


async def test_answers_without_a_cache_report_are_unknown_not_zero(seeded: Seeded) -> None:
    rows = {(row.day, row.model): row for row in await read_cache(seeded.url)}
    beta = rows[(OLDER, "beta")]
    assert (beta.reported, beta.unreported, beta.share) == (0, 2, None)
    alpha = rows[(OLDER, "alpha")]
    assert alpha.share == 800 / 2000, "the unreported 2,000 prompt tokens are not in it"


async def test_the_window_is_the_days_ending_today(seeded: Seeded) -> None:
    wider = await read_cache(seeded.url, days=CHART_DAYS + 1)
    assert [(r.day, r.model) for r in wider][-1] == (TODAY - timedelta(days=CHART_DAYS), "alpha")
    assert await read_cache(seeded.url, days=1) == []
    only_older = await read_cache(seeded.url, days=1, today=OLDER)
    assert only_older == [row for row in WANT if row.day == OLDER]


# ---- on the web ----------------------------------------------------------------------------


@pytest.fixture
async def client(seeded: Seeded) -> AsyncIterator[AsyncTestClient]:
    async with admin_client(seeded.settings, seeded.users) as test_client:
        yield test_client


def cells(html: str, day: date, model: str) -> list[str]:
    """The text of each cell of one row of the prompt cache table."""
    row = html.split(f'data-cache-day="{day.isoformat()}" data-cache-model="{model}"', 1)[1]
    row = row.split("</tr>", 1)[0]
    return [cell.split(">", 1)[1].split("</td>", 1)[0] for cell in row.split("<td")[1:]]


async def test_only_admins_see_it(client: AsyncTestClient) -> None:
    for url in ("/admin/trimmed", "/api/admin/trimmed"):
        for who in ("alice", "", "stranger"):
            response = await client.get(url, headers={"x-test-user": who})
            assert response.status_code == 403, (url, who)
            assert "prompt-cache" not in response.text and "cached_share" not in response.text


async def test_the_page_shows_the_table(client: AsyncTestClient) -> None:
    response = await client.get("/admin/trimmed", headers={"x-test-user": "root"})
    assert response.status_code == 200
    html = response.text
    assert 'id="prompt-cache"' in html and "style=" not in html
    table = html.split('id="prompt-cache"', 1)[1].split("</table>", 1)[0]
    assert table.count("data-cache-day=") == len(WANT)
    newer, older = NEWER.isoformat(), OLDER.isoformat()
    assert cells(html, NEWER, "alpha")[1:] == [
        *("alpha", "75.0%", "750", "1,000", "2", "0", "0", "250", "20", "0")
    ]
    beta = ["25.0%", "125", "500", "1", "0", "1", "—", "—", "1"]
    assert cells(html, NEWER, "beta")[2:] == beta
    alpha = ["40.0%", "800", "2,000", "2", "1", "2", "—", "—", "0"]
    assert cells(html, OLDER, "alpha")[2:] == alpha
    assert cells(html, OLDER, "beta")[2:] == [*("—", "—", "—", "0", "2", "0", "—", "—", "0")], (
        "unknown, not 0%"
    )
    # large's engine never said what its cache served: the review names the flags.
    note = html.split('id="unreported-cache">', 1)[1].split("</p>", 1)[0]
    assert note.startswith("large:") and "--enable-prompt-tokens-details" in note
    assert "--enable-cache-report" in note and "beta" not in note
    assert f'<time datetime="{newer}">{newer}</time>' in table
    assert table.index(newer) < table.index(older), "newest day first"
    assert table.count('class="number"') == 9 * len(WANT), "every figure right-aligned"


async def test_the_api_has_it_beside_the_list(client: AsyncTestClient) -> None:
    body = (await client.get("/api/admin/trimmed", headers={"x-test-user": "root"})).json()
    assert {"rows", "total", "page", "per_page", "pages", "sort", "order"} <= set(body)
    assert body["rows"] == [] and body["total"] == 0, "no trimmed conversation was seeded"
    cache = body["prompt_cache"]
    assert cache["days"] == CHART_DAYS
    assert cache["rows"] == [
        {
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
        for row in WANT
    ]
    assert [entry["model"] for entry in cache["unreported"]] == ["large"]
    beta = next(r for r in cache["rows"] if (r["day"], r["model"]) == (OLDER.isoformat(), "beta"))
    assert beta["cached_share"] is None and beta["answers_without_cache_report"] == 2


def test_check_config_names_the_flag_where_the_engine_reports_nothing(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process (the command's own start is tested elsewhere): its database is
    the seeded one."""
    monkeypatch.setenv("WEBAPP_DATABASE_URL", seeded.url)
    assert cli.main(["check-config", str(seeded.settings.config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(next(line for line in lines if "model 'large':" in line))
    following = lines[at + 1 : at + 5]
    assert any("note:" in line and "--enable-cache-report" in line for line in following)
    flagged = [line for line in lines if "--enable-prompt-tokens-details" in line]
    assert len(flagged) == 1, "only the model whose answers never said"
