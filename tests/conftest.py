"""Shared fixtures: databases (SQLite and PostgreSQL), settings, the app and its clients,
the conversation service, the fake upstream and vendors. Each is built from
tests/factories/ and defined once; a test module sets what its own settings need with
`pytestmark = pytest.mark.settings(extra=..., **fields)`."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.factories import (
    TEST_HASHER,
    Client,
    api_client,
    bearer_header,
    build_service,
    close_service,
    htmx_headers,
    make_user,
    settings_for,
    sign_in,
)
from tests.mcp_servers import connections, http_url  # noqa: F401  (the tool tests' servers)
from tests.postgres import require, throwaway_database
from tests.served import Gateway, gateway_on
from tests.upstream import (  # noqa: F401  (the fake OpenAI-compatible servers)
    FakeUpstream,
    engine_upstream,
    upstream,
)
from tests.vendors import (  # noqa: F401  (the fake Anthropic and Gemini APIs, their keys)
    vendor_keys,
    vendors,
)
from webapp.accounts.service import AccountService
from webapp.app import create_app
from webapp.chat.jobs import ChatJobs
from webapp.db import Database
from webapp.migrate import upgrade
from webapp.settings import Settings

# Titles written by the model make a call after every first answer: the tests that count
# or inspect the upstream's requests speak of sends. The tests of titles turn them on.
os.environ.setdefault("WEBAPP_MODEL_TITLES", "false")
# Hundreds of accounts are made (and signed in to) per run, here and by the servers the
# tests start: at argon2's standard cost that is minutes of CPU. Tests of the cost itself
# pass their own hasher.
os.environ.setdefault("WEBAPP_PASSWORD_HASHING", "cheapest")

TABLES = (
    "share",
    "conversation_tag",
    "message_file",
    "stored_file",
    "file_blob",
    "message",
    "conversation",
    "preset",
    "model_calibration",
    "caller_calibration",
    "api_token",
    "login_session",
    "sign_in_attempt",
    "embed_send",
    "gateway_call",
    "user_account",
)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file; each test gets a copy, so migrations run once per session."""
    path = tmp_path_factory.mktemp("db") / "template.db"
    upgrade(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database of this run's own, migrated from scratch, dropped at the end.
    Under CI the server must be there."""
    require()
    with throwaway_database("webapp_test") as url:
        upgrade(url)
        yield url


async def empty_tables(url: str) -> None:
    """Empty every table of the app and restart its ids (the schema stays), for a test that
    needs a clean slate. A DELETE, not a TRUNCATE: a TRUNCATE gives every table, index and
    TOAST table a new file and syncs them, some 0.2 s a test, where deleting the few rows a
    test leaves takes milliseconds."""
    engine = create_async_engine(url)
    async with engine.begin() as connection:
        for table in TABLES:  # children before their parents
            await connection.execute(text(f"DELETE FROM {table}"))
        await connection.execute(
            text(
                "SELECT setval(format('%I', sequencename)::regclass, 1, false) "
                "FROM pg_sequences WHERE schemaname = current_schema()"
            )
        )
    await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path
) -> Iterator[str]:
    """Each test that takes this runs on both databases, each time on an empty schema."""
    if request.param == "sqlite":
        path = tmp_path / "webapp.db"
        shutil.copy(sqlite_template, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    url = request.getfixturevalue("postgres_url")
    asyncio.run(empty_tables(url))
    yield url


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """For tests about behaviour that does not depend on the database."""
    path = tmp_path / "webapp.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def no_running_tasks() -> AsyncIterator[None]:
    yield
    pending = [t for t in asyncio.all_tasks() if t.get_name().startswith("answer-")]
    assert not pending, f"answers still running after the test: {pending}"


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    yield database
    await database.dispose()


@pytest.fixture
def accounts(db: Database) -> AccountService:
    return AccountService(db, hasher=TEST_HASHER)


@pytest.fixture
def settings(
    request: pytest.FixtureRequest,
    database_url: str,
    tmp_path: Path,
    upstream: FakeUpstream,  # noqa: F811
) -> Settings:
    """Settings on the fake upstream's catalog, on both databases; the module's `settings`
    marker adds catalog entries (`extra`) and sets fields."""
    marker = request.node.get_closest_marker("settings")
    return settings_for(database_url, tmp_path, upstream, **(marker.kwargs if marker else {}))


@pytest.fixture
def app(settings: Settings) -> Litestar:
    return create_app(settings)


@pytest.fixture
async def client(app: Litestar, settings: Settings) -> AsyncIterator[AsyncTestClient]:
    """alice's API client: her bearer token on every request."""
    async with api_client(settings, app=app) as test_client:
        yield test_client


@pytest.fixture
async def browser(app: Litestar) -> AsyncIterator[AsyncTestClient]:
    """A signed-out browser: cookies kept, redirects shown, not followed."""
    async with Client(app=app) as test_client:
        yield test_client


@pytest.fixture
async def callers(
    app: Litestar, settings: Settings, database_url: str
) -> AsyncIterator[dict[str, AsyncTestClient]]:
    """Three clients, each on an app of its own (as on three workers): one app's start-up
    and shutdown run once, with its client. The catalog must have the `support` embed
    (`extra=EMBED`)."""
    token = await make_user(database_url, "root", admin=True)
    async with (
        Client(app=app) as by_token,
        Client(app=create_app(settings)) as browser,
        Client(app=create_app(settings)) as visitor,
    ):
        by_token.headers.update(bearer_header(token))
        browser.headers["x-csrftoken"] = await sign_in(browser, "root")
        page = await visitor.get("/embed/support")
        assert page.status_code == 200
        # No cookie comes back over plain http (it is Secure): the visitor is its header.
        visitor.headers.update(htmx_headers(page.text))
        yield {"token": by_token, "session": browser, "visitor": visitor}


@pytest.fixture
async def chat(settings: Settings) -> AsyncIterator[ChatJobs]:
    service = await build_service(settings)
    yield service
    await close_service(service)


@pytest.fixture
def serve(
    tmp_path: Path,
    upstream: FakeUpstream,  # noqa: F811
) -> Iterator[Callable[..., Gateway]]:
    """`serve(database_url, **settings)` starts the app (in a thread, with uvicorn on its
    own loop) for alice and bob on a free port; stopped at the end."""
    with ExitStack() as running:

        def start(database_url: str, **overrides: Any) -> Gateway:
            settings = settings_for(database_url, tmp_path, upstream, **overrides)
            gateway = running.enter_context(gateway_on(settings, ("alice", "bob")))
            # A process's first app asks the upstream for its windows (the answer is cached
            # for the process, webapp.llm.discovery): what it asked while starting is not
            # the test's, whichever test happens to start a process's first app.
            upstream.forget_requests()
            return gateway

        yield start
