"""Benchmark: the server renders the page of a 10,000-message conversation.

Target (issue "Chat UI"): `GET /c/{id}` of a conversation of 10,000 messages
(5,000 turns) is rendered in under 50 ms median on this machine, and its HTML
stays under 200 KB. The page shows only the newest 50 turns, so the cost must
follow the page, not the conversation. Issue 11 adds the same page of a conversation
of 10,000 turns with 100 forks along its active branch (the page shows that branch,
and the alternatives of its turns).

The conversation is written as a long chat on a 16k-token model would leave it:
user messages and markdown answers of realistic, varied length (lists, code,
links), estimates stored, and every send that no longer fitted trimmed, so each
user turn on the page carries a trim marker. The request goes through the whole
app in-process (over ASGI, signed in with an API token): routing, auth,
dependencies, queries, markdown, templates. `--profile` adds a cProfile of the requests and a
breakdown by stage.

    make bench-page
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import logging
import os
import pstats
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert

from bench.common import fresh_sqlite, machine, pin_to_one_core, run, summary, timed, with_forks
from tests.factories import TEST_HASHER
from webapp.accounts.service import AccountService
from webapp.app import create_app
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.db import Database, create_engine
from webapp.llm.estimator import estimate_message
from webapp.settings import Settings
from webapp.web.markdown import render_markdown

TURNS = 5_000
FORKED_TURNS = 10_000
FORKS = 100
TARGET_MS = 50.0
REPEATS = 100
TARGET_KB = 200.0
WINDOW = 16_384
MAX_OUTPUT = 1_024
SAFETY = 0.03
MODEL = "assistant-16k"
CATALOG = f"""
[[providers]]
name = "offline"
kind = "demo"

[[models]]
name = "{MODEL}"
provider = "offline"
model_id = "demo"
context_window = {WINDOW}
max_output_tokens = {MAX_OUTPUT}
capabilities = ["chat"]

[[configurations]]
name = "chat"
model = "{MODEL}"
"""

TOPICS = [
    "the migration plan", "our caching layer", "the quarterly report", "a flaky test",
    "the deployment pipeline", "database indexes", "the onboarding guide", "error budgets",
    "the search feature", "rate limiting", "the billing export", "log retention",
]  # fmt: skip
WORDS = (  # noqa: SIM905
    "we should consider how the system behaves when the load grows and whether the current "
    "design still holds up once more people depend on it every day so it is worth checking "
    "the assumptions again before changing anything important in production"
).split()


def prose(rng: random.Random, words: int) -> str:
    start = rng.randrange(len(WORDS))
    text = " ".join(WORDS[(start + i) % len(WORDS)] for i in range(words))
    return text[0].upper() + text[1:] + "."


def user_text(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    kind = rng.random()
    if kind < 0.5:
        return f"Can you help me with {topic}? {prose(rng, rng.randint(5, 30))}"
    if kind < 0.8:
        return f"About {topic}: {prose(rng, rng.randint(20, 60))} What would you do?"
    return f"Here is what I have for {topic}:\n\n{prose(rng, rng.randint(40, 90))}"


def answer_text(rng: random.Random) -> str:
    topic = rng.choice(TOPICS)
    parts = [f"Good question about {topic}. {prose(rng, rng.randint(30, 90))}"]
    if rng.random() < 0.5:
        parts.append(prose(rng, rng.randint(40, 120)))
    if rng.random() < 0.5:
        items = "\n".join(
            f"- **Step {i}**: {prose(rng, rng.randint(6, 14))}" for i in range(1, rng.randint(3, 6))
        )
        parts.append(items)
    if rng.random() < 0.35:
        lines = "\n".join(
            f"    result_{i} = process(items[{i}], retries={rng.randint(1, 5)})"
            for i in range(rng.randint(2, 8))
        )
        parts.append(f"```python\ndef handle(items):\n{lines}\n    return result_0\n```")
    if rng.random() < 0.3:
        parts.append(
            f"See [the docs](https://example.com/docs/{rng.randint(1, 99)}) and `config.toml`."
        )
    parts.append(prose(rng, rng.randint(20, 80)))
    return "\n\n".join(parts)


async def populate(url: str, conversation_id: str, turns: int = TURNS, forks: int = 0) -> None:
    """TURNS turns in the (empty) conversation; every send that did not fit is trimmed, as the
    bound would have trimmed it, with its fit facts stored."""
    rng = random.Random(11)
    reserve = MAX_OUTPUT
    budget = WINDOW - reserve - int(WINDOW * SAFETY + 0.999)
    columns = set(Message.model_fields)
    rows: list[dict[str, Any]] = []
    turn_tokens: list[int] = []
    oldest_kept = 1  # the oldest middle turn still sent (turn 0 is the head, always sent)
    middle = 0  # tokens of the middle turns oldest_kept .. newest-1
    trimmed = 0
    for turn in range(turns):
        user, answer = user_text(rng), answer_text(rng)
        user_tokens = estimate_message({"role": "user", "content": user})
        answer_tokens = estimate_message({"role": "assistant", "content": answer})
        head = turn_tokens[0] if turn_tokens else 0
        while turn > 1 and oldest_kept < turn and head + middle + user_tokens > budget:
            middle -= turn_tokens[oldest_kept]
            oldest_kept += 1
        dropped = max(0, oldest_kept - 1) if turn > 1 else 0
        trimmed += dropped > 0
        seq = 2 * turn + 1
        rows.append(
            {
                "conversation_id": conversation_id,
                "seq": seq,
                "role": Role.USER.value,
                "content": user,
                "status": Status.COMPLETE.value,
                "estimated_tokens": user_tokens,
                "prior_turns": turn,
                "dropped_turns": dropped,
                "fit_model": MODEL,
                "fit_window": WINDOW,
                "fit_reserve": reserve,
                "fit_budget": budget,
                "fit_estimated_tokens": head + middle + user_tokens,
                "fit_overflow_at_floor": False,
            }
        )
        rows.append(
            {
                "conversation_id": conversation_id,
                "seq": seq + 1,
                "role": Role.ASSISTANT.value,
                "content": answer,
                "status": Status.COMPLETE.value,
                "estimated_tokens": answer_tokens,
                "content_html": str(render_markdown(answer)),  # as the service stores it
                "model": MODEL,
                "finish_reason": "stop",
            }
        )
        turn_tokens.append(user_tokens + answer_tokens)
        if turn > 0:
            middle += user_tokens + answer_tokens
    keys = {key for row in rows for key in row} & columns  # executemany wants one shape
    rows = [{key: row.get(key) for key in keys} for row in rows]
    rows = with_forks(list(zip(rows[::2], rows[1::2], strict=True)), forks)
    engine = create_engine(url)
    async with engine.begin() as connection:
        for start in range(0, len(rows), 2000):
            await connection.execute(insert(Message), rows[start : start + 2000])
    await engine.dispose()
    size = sum(len(row["content"]) for row in rows)
    print(
        f"  stored {len(rows):,} messages ({size / 1e6:.1f} MB of text); "
        f"{trimmed:,} of {turns:,} sends trimmed, {forks} forks along the active branch"
    )


async def create_account(url: str) -> str:
    """A user and an API token for it (the pages need a signed-in owner)."""
    engine = Database(url)
    try:
        accounts = AccountService(engine, hasher=TEST_HASHER)
        user = await accounts.create_user("bench", "bench password 1234")
        assert user.id is not None
        _, token = await accounts.create_token(user.id, "bench")
        return token
    finally:
        await engine.dispose()


async def owner_of(app: Any, conversation_id: str) -> str:
    conversation = await app.state.chat.db.read(
        lambda session: session.get(Conversation, conversation_id)
    )
    assert conversation is not None
    return conversation.owner


async def stages(app: Any, conversation_id: str, repeats: int = 10) -> None:
    """Where a page's time goes, stage by stage, outside the HTTP stack."""
    from webapp.chat.web.views import message_views
    from webapp.web.templates import environment

    chat = app.state.chat
    owner = await owner_of(app, conversation_id)
    times: dict[str, list[float]] = {}

    def clock(name: str, start: float) -> float:
        now = time.perf_counter()
        times.setdefault(name, []).append((now - start) * 1000)
        return now

    for _ in range(repeats):
        start = time.perf_counter()
        row, rows, has_older = await chat.reader.page(owner, conversation_id, turns=50)
        start = clock("query the page's rows", start)
        alternatives = await chat.reader.alternatives_of(conversation_id, rows)
        start = clock("alternatives of its turns", start)
        await chat.reader.conversations(owner)
        start = clock("conversation list", start)
        views = message_views(rows, alternatives)
        html = [str(view.html) for view in views]
        start = clock("markdown (100 messages)", start)
        environment.get_template("chat/_messages.html").render(
            conversation=row, base=f"/c/{conversation_id}", messages=views, has_older=has_older
        )
        clock("message templates (markdown again)", start)
        assert html
    for name, samples in times.items():
        print(f"    {name:<36} median {statistics.median(samples):6.2f} ms")


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[None]:
    """The app's lifespan (start-up and shutdown hooks), driven over ASGI in this loop."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    assert started["type"] == "lifespan.startup.complete", started
    try:
        yield
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


async def measure(
    url: str, folder: Path, profile: bool, turns: int = TURNS, forks: int = 0
) -> None:
    catalog = folder / "catalog.toml"
    catalog.write_text(CATALOG, encoding="utf-8")
    token = await create_account(url)
    app = create_app(Settings(database_url=url, config=catalog))
    # The app runs in this event loop (not in a test client's thread), so the profile sees it.
    # httpx types an ASGI app with Starlette's MutableMapping scopes, Litestar with TypedDicts.
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]  # one ASGI callable
    async with (
        running(app),
        httpx.AsyncClient(
            transport=transport,
            base_url="http://bench",
            headers={"Authorization": f"Bearer {token}"},
        ) as client,
    ):
        created = await client.post(
            "/api/conversations", json={"configuration": "chat", "title": "A long chat"}
        )
        assert created.status_code == 201, created.text
        conversation_id = created.json()["id"]
        await populate(url, conversation_id, turns, forks)
        path = f"/c/{conversation_id}"
        response = await client.get(path)
        assert response.status_code == 200, response.text[:500]
        html = response.text
        markers = html.count('class="trim-marker"')
        articles = html.count("<article ")
        alternatives = html.count('class="alternatives"')

        async def render() -> None:
            reply = await client.get(path)
            assert reply.status_code == 200

        samples = await timed(render, REPEATS, warmup=10)
        size_kb = len(response.content) / 1024
        median = statistics.median(samples)
        print(f"  GET {path}: {summary(samples)}")
        print(
            f"  HTML {size_kb:.1f} KB: {articles} messages, {markers} trim markers, "
            f"{alternatives} turns with alternatives"
        )
        print(
            f"  targets: median < {TARGET_MS:.0f} ms ({'met' if median < TARGET_MS else 'MISSED'}),"
            f" HTML < {TARGET_KB:.0f} KB ({'met' if size_kb < TARGET_KB else 'MISSED'})"
        )
        if profile:
            print("  by stage (the same work outside the HTTP stack):")
            await stages(app, conversation_id)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(20):
                await render()
            profiler.disable()
            out = io.StringIO()
            stats = pstats.Stats(profiler, stream=out)
            stats.sort_stats("cumulative").print_stats(35)
            stats.sort_stats("tottime").print_stats(15)
            print("  cProfile of 20 requests (queries run in aiosqlite's thread: waits show as")
            print("  time in the event loop's select):")
            print(out.getvalue())


async def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", action="store_true", help="add a cProfile and stage times")
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {machine()}; {pin_to_one_core()}; load average {load}")
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        url = await asyncio.to_thread(fresh_sqlite, folder / "bench.db")
        print("SQLite, linear:")
        await measure(url, folder, args.profile)
        url = await asyncio.to_thread(fresh_sqlite, folder / "forked.db")
        print(f"SQLite, {FORKS} forks:")
        await measure(url, folder, args.profile, FORKED_TURNS, FORKS)


if __name__ == "__main__":
    run(main())
