"""Browser fixtures: one Chromium, the app on `webapp serve` processes, pages made in one place.

- `browser`: Debian's Chromium driven by Playwright's sync API (so browser tests are plain
  sync functions). Missing Chromium fails under CI and skips elsewhere.
- `live_server`: the app on a free port, on a fresh SQLite database, shared by the package's
  tests (each test makes its own conversations); `servers` starts more for one test (a second
  worker on the same database, a server killed and restarted) and stops them afterwards.
- `open_page(server, path)`: the only place a browser page is created; when the app sends
  it to the sign-in page it signs in as the test user (made on each database, with an API
  token that `Server.api` uses).
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import os
import shutil
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import httpx
import pluggy
import pytest
from playwright.sync_api import Browser, Page, Response, sync_playwright

from tests.catalogs import write_upstream_catalog
from tests.conftest import empty_tables
from tests.factories import make_account
from tests.live_server import ServerProcess, free_port
from tests.mcp_servers import stdio_fixture_toml
from tests.upstream import FakeUpstream
from webapp.accounts.models import DEFAULT_SCOPES, SETTINGS

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
USERNAME = "tester"
PASSWORD = "correct horse battery staple"
T = TypeVar("T")

EXTRA_CATALOG = """
[[models]]
name = "tiny"
provider = "up"
model_id = "small"
context_window = 600
max_output_tokens = 60
capabilities = ["chat"]

[[configurations]]
name = "tiny"
model = "tiny"

[[models]]
name = "narrow"
provider = "up"
model_id = "small"
context_window = 600
max_output_tokens = 60
capabilities = ["chat"]

[[configurations]]
name = "narrow"
model = "narrow"

[[configurations]]
name = "short"
model = "small"
max_tokens = 20

[[models]]
name = "seeing"
provider = "up"
model_id = "small"
context_window = 2048
max_output_tokens = 100
capabilities = ["chat", "vision"]

[[configurations]]
name = "seeing"
model = "seeing"

[[models]]
name = "seeing-cheap"
provider = "up"
model_id = "small"
context_window = 2048
max_output_tokens = 100
capabilities = ["chat", "vision"]
image_tokens = 300

[[configurations]]
name = "seeing-cheap"
model = "seeing-cheap"
"""
TOOLS_CATALOG = f"""
{stdio_fixture_toml("open-tools", 'tools = ["markup"]', "timeout = 20")}
{stdio_fixture_toml("asking-tools", 'tools = ["echo"]', 'approval = "always"', "timeout = 20")}
[[configurations]]
name = "tooled"
model = "small"
tools = ["open-tools"]

[[configurations]]
name = "guarded"
model = "small"
tools = ["asking-tools"]
"""
"""Besides the fake upstream's catalog: `tiny`, a 600-token window on the upstream, so that
a few turns of a few hundred characters are trimmed; `narrow`, the same again, for the
tests of the cut line, the phone and axe (the estimate's calibration is learned per model:
their sends must not move `tiny`'s, which other tests count on); `short`, answers cut off
at 20 tokens, for Continue; `seeing`, a model that sees, for pictures in the composer, and
`seeing-cheap`, one that counts a picture as 300 tokens (`image_tokens`), so a chip's count
changes between them.
`TOOLS_CATALOG` adds the MCP fixture (tests/mcp_fixture.py) on stdio twice: `tooled` offers
its `markup` tool, `guarded` its `echo` behind the owner's approval."""

RECORDER = """
(() => {
  const newest = () => {
    const all = document.querySelectorAll('#messages [data-role="assistant"]');
    return all.length ? all[all.length - 1] : null;
  };
  const state = (el) => el ? {
    id: el.dataset.messageId,
    status: el.dataset.status,
    text: el.querySelector('.content').textContent.trim(),
  } : null;
  window.__sse = [];
  document.addEventListener('htmx:sse:after:message', (event) => {
    const message = event.detail && event.detail.message;
    window.__sse.push({event: (message && message.event) || null, ...state(newest())});
  });
  document.addEventListener('DOMContentLoaded', () => { window.__initial = state(newest()); });
})();
"""
"""Installed in every page: what the newest answer looked like when the page was parsed
(`window.__initial`) and after each SSE message (`window.__sse`)."""


def outside_playwright(call: Callable[..., T], *args: Any) -> T:
    """Run `call` in a thread of its own. Between calls, Playwright's sync API leaves its event
    loop marked as running in the main thread, where `asyncio.run()` (which the database
    fixtures use) then refuses to start."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call, *args).result()


def create_account(database_url: str) -> str:
    """The test user (an admin) and an API token for it that may also change its settings
    (the tests put them back); returns the token."""
    made = make_account(
        database_url,
        USERNAME,
        password=PASSWORD,
        admin=True,
        token_name="browser tests",
        scopes=(*DEFAULT_SCOPES, SETTINGS),
    )
    _, token = asyncio.run(made)
    return token


def sign_in(page: Page, response: Response | None) -> None:
    """Fill the sign-in form the page was sent to; it goes on to where it was headed."""
    if page.locator('input[name="username"]').count() == 0:
        kind = response.headers.get("content-type") if response else None
        pytest.fail(f"{page.url} shows no sign-in form (Content-Type: {kind})")
    page.locator('input[name="username"]').fill(USERNAME)
    page.locator('input[name="password"]').fill(PASSWORD)
    with page.expect_navigation():
        page.locator('input[name="password"]').press("Enter")
    if urlsplit(page.url).path == "/login":
        error = page.locator(".inline-error").all_inner_texts()
        pytest.fail(f"signing in as {USERNAME!r} failed: {error}")


@dataclass(kw_only=True)
class Server(ServerProcess):
    """`webapp serve` for the browser tests, on one database, with the test user's token."""

    database_url: str
    token: str | None = None
    """The test user's API token, for the JSON API."""
    client: httpx.Client | None = None
    browser_state: Any = None
    """A signed-in browser's cookies, once a page has signed in on this server."""

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A JSON API call as the test user (with its API token)."""
        if self.client is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self.client = httpx.Client(base_url=self.url, timeout=30, headers=headers)
        return self.client.request(method, path, **kwargs)

    def _end(self, *, graceful: bool) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        super()._end(graceful=graceful)


LAUNCHED: list[Server] = []
"""Every server started in this session, for the failure report."""


CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed


@pytest.fixture(autouse=True)
def server_output_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """When a test fails, show what the servers logged while it ran."""
    seen = {id(server): len(server.output()) for server in LAUNCHED}
    yield
    if not request.node.stash.get(CALL_FAILED, False):
        return
    for server in LAUNCHED:
        lines = server.output()[seen.get(id(server), 0) :].splitlines()
        if lines:
            print(f"---- {server.name} ({server.log}), last {min(len(lines), 80)} lines:")
            print("\n".join(lines[-80:]))


@dataclass
class Servers:
    """Starts app servers on one catalog; `close` stops every one it started."""

    catalog: Path
    folder: Path
    started: list[Server] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)
    """The test user's API token, per database."""
    environment: dict[str, str] = field(default_factory=dict)
    """Settings of these servers besides the usual ones (`WEBAPP_*` variables)."""

    def start(
        self,
        database_url: str,
        *,
        name: str | None = None,
        stale_stream_after: float | None = None,
    ) -> Server:
        """A server on `database_url`, answering once this returns."""
        (server,) = self.start_several(
            database_url, [name or f"server-{len(self.started) + 1}"], stale_stream_after
        )
        return server

    def start_several(
        self, database_url: str, names: list[str], stale_stream_after: float | None = None
    ) -> list[Server]:
        """Several servers (workers) on one database, started side by side."""
        if database_url not in self.tokens:
            self.tokens[database_url] = outside_playwright(create_account, database_url)
        launched = [self._launch(database_url, name, stale_stream_after) for name in names]
        for server in launched:
            server.wait_until_ready()
        return launched

    def _launch(self, database_url: str, name: str, stale_stream_after: float | None) -> Server:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "WEBAPP_DATABASE_URL": database_url,
            "WEBAPP_CONFIG": str(self.catalog),
            "WEBAPP_SECRET_KEY": "browser-tests-secret-key-0123456789",
            "WEBAPP_STREAM_FLUSH_INTERVAL": "0.25",
            "WEBAPP_RATE_LIMIT_MESSAGES": "0",  # tests send faster than a person
            **self.environment,
        }
        if stale_stream_after is not None:
            env["WEBAPP_STALE_STREAM_AFTER"] = str(stale_stream_after)
        server = Server(
            name=name, env=env, log=self.folder / f"{name}.log", database_url=database_url
        )
        server.token = self.tokens[database_url]
        self.started.append(server)
        LAUNCHED.append(server)
        server.launch()
        return server

    def restart(self, server: Server, *, kill: bool = False) -> Server:
        """Stop (or SIGKILL) `server` and start it again: same port, same database."""
        if kill:
            server.kill()
        else:
            server.stop()
        server.start()
        return server

    def close(self) -> None:
        for server in self.started:
            server.stop()


# ---- the upstream and the catalog ----------------------------------------------------------


@pytest.fixture(scope="package")
def upstream_server() -> Iterator[FakeUpstream]:
    with FakeUpstream() as server:
        yield server


@pytest.fixture
def upstream(upstream_server: FakeUpstream) -> Iterator[FakeUpstream]:
    """The package's fake upstream (the catalog points at it), reset around each test."""
    upstream_server.reset()
    yield upstream_server
    upstream_server.reset()


@pytest.fixture(scope="package")
def embed_host_port() -> int:
    """The port of the host page that the catalog's embed allows to frame it."""
    return free_port()


@pytest.fixture(scope="package")
def catalog_file(
    tmp_path_factory: pytest.TempPathFactory, upstream_server: FakeUpstream, embed_host_port: int
) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "catalog.toml"
    embed = (
        '\n[[embeds]]\nname = "help"\nconfiguration = "small"\n'
        # Another *site*, not just another port of 127.0.0.1: the browser treats the frame
        # as third-party, as on a real host site.
        f'allowed_origins = ["http://localhost:{embed_host_port}"]\n'
        'title = "Ask us"\ngreeting = "Hello from the help desk."\n'
        # An embed whose visitors may attach files, on a model that sees.
        '\n[[embeds]]\nname = "photos"\nconfiguration = "seeing"\nfiles = true\n'
        f'allowed_origins = ["http://localhost:{embed_host_port}"]\nshow_internals = true\n'
    )
    return write_upstream_catalog(
        path, upstream_server, extra=EXTRA_CATALOG + TOOLS_CATALOG + embed
    )


# ---- servers -------------------------------------------------------------------------------


@pytest.fixture(scope="package")
def live_server(
    catalog_file: Path, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The app on SQLite, shared by the package's tests."""
    folder = tmp_path_factory.mktemp("live")
    database = folder / "webapp.db"
    shutil.copy(sqlite_template, database)
    servers = Servers(catalog_file, folder)
    try:
        yield servers.start(f"sqlite+aiosqlite:///{database}", name="live-server")
    finally:
        servers.close()


@pytest.fixture
def servers(catalog_file: Path, tmp_path: Path) -> Iterator[Servers]:
    """Servers of this test's own: several on one database, or one to kill and restart."""
    started = Servers(catalog_file, tmp_path)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def postgres_database(request: pytest.FixtureRequest) -> str:
    """The session's PostgreSQL (required under CI), emptied for this test."""
    url: str = outside_playwright(request.getfixturevalue, "postgres_url")
    outside_playwright(asyncio.run, empty_tables(url))
    return url


# ---- the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the package (package scope, so Playwright's loop is gone before the
    rest of the suite's async tests run)."""
    if not CHROMIUM.exists():
        message = f"Chromium is missing at {CHROMIUM}: apt-get install chromium"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()


OpenPage = Callable[..., Page]


@pytest.fixture
def open_page(browser: Browser) -> Iterator[OpenPage]:
    """`open_page(server, path="/", color_scheme="light", bypass_csp=False, viewport=(w, h))`:
    a page in a fresh browser context,
    navigated to `path`. Uncaught JavaScript errors in any page fail the test."""
    contexts = []
    errors: list[str] = []

    def open_page(
        server: Server,
        path: str = "/",
        *,
        color_scheme: Literal["light", "dark"] = "light",
        bypass_csp: bool = False,
        viewport: tuple[int, int] = (1280, 800),
    ) -> Page:
        context = browser.new_context(
            base_url=server.url,
            color_scheme=color_scheme,
            viewport={"width": viewport[0], "height": viewport[1]},
            storage_state=server.browser_state,
            bypass_csp=bypass_csp,  # for axe-core (tests/browser/axe.py)
        )
        contexts.append(context)
        context.set_default_timeout(10_000)
        context.add_init_script(RECORDER)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(f"{page.url}: {error}"))
        response = page.goto(path)
        if urlsplit(page.url).path == "/login":  # the app has accounts: sign in once per server
            sign_in(page, response)
            server.browser_state = context.storage_state()
            if urlsplit(page.url).path != urlsplit(server.url + path).path:
                page.goto(path)
        return page

    yield open_page
    for context in contexts:
        context.close()
    assert not errors, f"uncaught JavaScript errors: {errors}"


@pytest.fixture(scope="package")
def artifacts() -> Path:
    """Where screenshots go (git-ignored)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


# ---- a host site for the embed -------------------------------------------------------------

HostPage = Callable[[int, str], str]
"""`host_page(port, embed_url)`: the URL of a page on `localhost:port` framing the embed."""


@pytest.fixture
def host_page(tmp_path: Path) -> Iterator[HostPage]:
    """Serve an HTML page framing the embed, on a port of our choosing, as
    `http://localhost:PORT`: another site than the app's `127.0.0.1`."""
    started: list[http.server.ThreadingHTTPServer] = []

    def serve(port: int, embed_url: str) -> str:
        folder = tmp_path / f"host-{port}"
        folder.mkdir()
        (folder / "index.html").write_text(
            f'<!doctype html><h1>A shop</h1><iframe id="chat" src="{embed_url}" '
            'width="480" height="620" title="Chat"></iframe>'
        )
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return f"http://localhost:{port}/"

    yield serve
    for server in started:
        server.shutdown()
        server.server_close()  # the next test's host page binds the same port
