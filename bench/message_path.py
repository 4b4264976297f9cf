"""The modules one chat message crosses, in the order it first reaches them.

A warm in-process app (a SQLite file, the fake upstream in a process of its own, a user
signed in through the login form) takes one page send, `POST /c/{id}/send`, while a
profile hook on every thread notes each function of `webapp` that runs. What it prints
is the list docs/architecture.md's message path is written from: one line a module,
with the functions it reached, first until the send's response, then until the
answer's final row.

    python -m bench.message_path
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from bench.common import fresh_sqlite, run
from bench.processes import upstream
from tests.catalogs import write_upstream_catalog
from tests.factories import Client, found, htmx_headers, make_user, sign_in
from webapp.app import create_app
from webapp.chat.jobs import ChatJobs
from webapp.settings import Settings

STAGES = {
    "send": "from the form post to the send's response",
    "answer": "then until the answer's final row",
}
ROOT = str(Path(__file__).resolve().parent.parent / "webapp")


@dataclass(frozen=True, slots=True)
class At:
    base_url: str


class Trace:
    """Which webapp functions ran in each stage, per module, in first-reached order."""

    def __init__(self) -> None:
        self.stage = ""
        self.stages: dict[str, dict[str, dict[str, None]]] = {}

    def hook(self, frame: FrameType, event: str, _: object) -> None:
        if not self.stage or event != "call" or not frame.f_code.co_filename.startswith(ROOT):
            return
        module = "webapp" + frame.f_code.co_filename[len(ROOT) :]
        modules = self.stages.setdefault(self.stage, {})
        modules.setdefault(module, {})[frame.f_code.co_qualname] = None

    def install(self) -> None:
        """On this thread and every thread started from now on (the test client's loop,
        the database's threads): a hook that notes nothing until a stage is named."""
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)

    def remove(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


async def trace_one_send(folder: Path, port: int) -> Trace:
    where = At(f"http://127.0.0.1:{port}/v1")
    settings = Settings(
        database_url=fresh_sqlite(folder / "path.db"),
        config=write_upstream_catalog(folder / "catalog.toml", where),
    )
    await make_user(settings.database_url, "reader")
    app = create_app(settings)
    chat: ChatJobs = app.state.chat
    trace = Trace()
    trace.install()
    async with Client(app=app, base_url="http://testserver.local") as client:
        await sign_in(client, "reader")
        for stage in ("warm-up", "send", "answer"):
            page = await client.get("/", follow_redirects=True)
            conversation = str(page.url).rstrip("/").rsplit("/", 1)[-1]
            headers = {**htmx_headers(page.text), "HX-Request": "true"}
            if stage != "warm-up":
                trace.stage = "send"
            response = await client.post(
                f"/c/{conversation}/send", data={"content": "Hello there"}, headers=headers
            )
            assert response.status_code == 200, response.text
            if stage != "warm-up":
                trace.stage = "answer"
            answer_id = int(found(r"/answers/(\d+)/stream", response.text))
            running = chat.answers.get(answer_id)
            while running is not None and not running.task.done():
                await asyncio.sleep(0.05)  # the task runs on the test client's loop
            await asyncio.sleep(0.5)  # the flusher's last write of the final row
            trace.stage = ""
            if stage != "warm-up":
                break
    trace.remove()
    return trace


async def main() -> None:
    with (
        tempfile.TemporaryDirectory() as name,
        upstream(Path(name), set(), 0.05, "Hello from the fake upstream") as port,
    ):
        trace = await trace_one_send(Path(name), port)
    earlier: set[str] = set()
    for stage, modules in trace.stages.items():
        print(f"## {STAGES[stage]}: {len(modules)} modules ({len(set(modules) - earlier)} new)")
        for number, (module, reached) in enumerate(modules.items(), 1):
            functions = list(reached)
            more = f" (+{len(functions) - 8})" if len(functions) > 8 else ""
            mark = "" if module in earlier else "*"
            print(f"{number:3}. {mark}{module}: {', '.join(functions[:8])}{more}")
        earlier |= set(modules)


if __name__ == "__main__":
    run(main())
