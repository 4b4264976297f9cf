"""Render workers: processes of their own that turn markdown into HTML under a deadline.

Rendering a large text takes seconds of pure Python (markdown-it reads about 100 KB a
second), and some inputs take far longer than their size suggests (Pygments lexers that
backtrack, linkify on thousands of URLs in a row). On the event loop that would stall
every request of the process; in a thread it would not be much better, as the thread
holds the GIL for a whole regex match, however long, and its garbage makes the loop's
collections slow. So webapp.web.markdown renders such texts here:

- each worker is a process (a fresh interpreter, so it inherits no threads or sockets,
  and started as a plain command, so it never re-imports the server's main module as
  multiprocessing's spawn does), so nothing it does holds the server's GIL or grows its
  heap;
- at most `WORKERS` renders run at once per server process (one render thread owns each
  worker); more wait their turn, off the loop;
- a render gets `RENDER_SECONDS`; a worker that overruns it is killed (a new one is
  started for the next text), and the caller gets None and shows the text plain;
- inside a worker, code blocks are coloured under their own time limit (see
  webapp.web.highlight), so one bad block loses its colour, not the whole answer's markup.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

log = logging.getLogger(__name__)

WORKERS = 2
"""Render workers per server process, and so renders running at once."""

RENDER_SECONDS = 10.0
"""Time one text may take to render before its worker is killed and it is shown plain."""

START_SECONDS = 60.0
"""Time a new worker may take to start (import markdown-it, Pygments, nh3)."""

_READY = b"ready"
_RENDERED, _FAILED = b"+", b"-"
"""A worker's answer: the HTML after `_RENDERED`, or `_FAILED` alone. Texts and answers
cross as UTF-8 bytes (lone surrogates kept), never as pickles."""
_COLOURED, _PLAIN_CODE = b"c", b"p"
"""What a text is sent after: whether its code blocks are coloured."""
_executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="webapp-render")
_local = threading.local()
_running: set[_Worker] = set()
_running_lock = threading.Lock()


class WorkerFailed(Exception):
    """A worker did not start, overran its deadline, or died."""


def serve(fd: int, render_here: Callable[[str], str]) -> None:
    """A worker's life (`python -c` runs it): render each text it is sent on the socket
    `fd` with `render_here` (webapp.web.markdown's, which sends texts here, so it is
    named by the command rather than imported), until the server closes it or goes away."""
    from webapp.web import highlight

    connection = Connection(fd)
    highlight.time_limited()
    connection.send_bytes(_READY)
    while True:
        try:
            asked = connection.recv_bytes()
        except (EOFError, OSError):  # the server closed the pipe or died
            return
        text = _text(asked[1:])
        highlight.new_render(colour=asked[:1] == _COLOURED)
        try:
            answer = _RENDERED + _bytes(render_here(text))
        except Exception:  # a bug or a library's failure on odd input: shown plain
            log.exception("rendering failed")
            answer = _FAILED
        connection.send_bytes(answer)


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


class _Worker:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        # The server's import path, as multiprocessing would pass it on: the worker finds
        # this very code however the server was started.
        path = os.pathsep.join(entry or os.getcwd() for entry in sys.path)
        code = (
            "from webapp.web.markdown import render_here; "
            f"from webapp.web.render_workers import serve; serve({theirs.fileno()}, render_here)"
        )
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                env={**os.environ, "PYTHONPATH": path},
                start_new_session=True,  # a Ctrl-C of the server's terminal is the server's
            )
        finally:
            theirs.close()
        self.connection = Connection(ours.detach())
        with _running_lock:
            _running.add(self)
        try:
            started = self.connection.poll(START_SECONDS) and self.connection.recv_bytes() == _READY
        except (EOFError, OSError):
            started = False
        if not started:
            self.close()
            raise WorkerFailed("a render worker did not start")

    def render(self, text: str, seconds: float, colour: bool) -> str | None:
        self.connection.send_bytes((_COLOURED if colour else _PLAIN_CODE) + _bytes(text))
        if not self.connection.poll(seconds):
            raise WorkerFailed(f"rendering {len(text):,} characters took over {seconds:g} s")
        answer = self.connection.recv_bytes()
        return _text(answer[1:]) if answer[:1] == _RENDERED else None

    def close(self) -> None:
        with _running_lock:
            _running.discard(self)
        self.connection.close()
        self.process.kill()
        self.process.wait()


@atexit.register
def _stop_all() -> None:
    with _running_lock:
        workers = list(_running)
    for worker in workers:
        worker.close()


def _render_on_this_thread(text: str, seconds: float, colour: bool) -> str | None:
    """Runs on a render thread, which keeps its own worker from one text to the next."""
    worker: _Worker | None = getattr(_local, "worker", None)
    try:
        if worker is None:
            worker = _local.worker = _Worker()
        return worker.render(text, seconds, colour)
    except (WorkerFailed, EOFError, OSError) as error:
        log.warning("a render worker failed, the text is shown plain: %s", error)
        if worker is not None:
            worker.close()
        _local.worker = None
        return None


def render(text: str, seconds: float = RENDER_SECONDS) -> str | None:
    """The text's HTML from a worker (None: it failed or overran), waiting for it here."""
    return _executor.submit(_render_on_this_thread, text, seconds, True).result()


async def render_async(
    text: str, seconds: float = RENDER_SECONDS, *, colour: bool = True
) -> str | None:
    """The text's HTML from a worker (None: it failed or overran); the loop runs meanwhile.
    Without `colour`, code blocks are shown plain (a block still being written)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor, _render_on_this_thread, text, seconds, colour)
