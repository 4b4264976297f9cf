"""Heavy work on a file in a child process of its own, bounded in time and memory.

A decoder fed a crafted file can take minutes or gigabytes; a thread running it could
be neither stopped nor bounded, and pure-Python parsing (pypdf) would hold the GIL the
event loop needs. So each file is read in a process of its own, killed when its time is
up. Starting an interpreter per file costs a second of a busy machine, so each app
process keeps `READERS` small reader processes (`python -m
webapp.chat.files.isolation`, nothing of the app's threads, sockets or state, the
decoders imported once); a reader forks a child per file (a single-threaded process
forks safely) and waits for it within the file's time. The app waits for its reader on
a thread of its own, so the loop never waits at all. (multiprocessing's start methods
were tried first: `fork` copies a process full of threads, and `forkserver` and `spawn`
run the parent's main script again in every child.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import queue
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, TypeVar

from webapp.errors import InvalidInput

Result = TypeVar("Result")

READERS = 2
"""Files read at once by one app process; more wait their turn."""
CHILD_MEMORY_BYTES = 2 * 2**30
"""The address space a child may take: past it the decoder fails, and the file with it."""
_LENGTH = struct.Struct(">Q")


class TookTooLong(InvalidInput):
    status_code = 422


def _send(stream: IO[bytes], value: object) -> None:
    data = pickle.dumps(value)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (size,) = _LENGTH.unpack(head)
    return pickle.loads(stream.read(size))


class _Reader:
    """One reader process, started on first use and again if it died."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    def run(self, work: Callable[..., object], args: tuple[Any, ...], seconds: float) -> Any:
        process = self._process
        if process is None or process.poll() is not None:
            command = [sys.executable, "-m", __name__]
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self._process = process
        assert process.stdin is not None and process.stdout is not None
        try:
            _send(process.stdin, (work, args, seconds))
            return _receive(process.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            process.kill()
            self._process = None
            return ("failed", None)


_IDLE: queue.SimpleQueue[_Reader] = queue.SimpleQueue()
for _ in range(READERS):
    _IDLE.put(_Reader())
_WAITING = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="file-reader")


def _run(what: str, seconds: float, work: Callable[..., Result], args: tuple[Any, ...]) -> Result:
    reader = _IDLE.get()
    try:
        outcome, value = reader.run(work, args, seconds)
    finally:
        _IDLE.put(reader)
    if outcome == "timeout":
        raise TookTooLong(f"{what} took longer than {seconds:g} s to read, and was refused")
    if outcome == "failed":
        raise InvalidInput(f"{what} could not be read (its reader failed)")
    if outcome == "refused":
        message = str(value)
        raise InvalidInput(message if what in message else f"{what}: {message}")
    result: Result = value
    return result


async def in_child(what: str, seconds: float, work: Callable[..., Result], *args: Any) -> Result:
    """`work(*args)` in a child process, its result; InvalidInput naming `what` when the
    work refuses it, fails or is not done within `seconds`."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_WAITING, _run, what, seconds, work, args)


def _child(writing: int, work: Callable[..., object], args: tuple[Any, ...]) -> None:
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit: that one holds
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    try:
        outcome: tuple[str, object] = ("done", work(*args))
    except InvalidInput as refused:
        outcome = ("refused", refused.message)
    except MemoryError:
        outcome = ("refused", "it takes too much memory to read")
    with os.fdopen(writing, "wb") as out:
        _send(out, outcome)


def _one(work: Callable[..., object], args: tuple[Any, ...], seconds: float) -> object:
    """The reader's side of one file: a child forked to do it, its outcome, or "timeout"
    when it is not done in time (the child is killed)."""
    reading, writing = os.pipe()
    deadline = time.monotonic() + seconds
    pid = os.fork()
    if pid == 0:  # the child
        os.close(reading)
        try:
            _child(writing, work, args)
        finally:
            os._exit(0)
    os.close(writing)
    received = bytearray()
    with os.fdopen(reading, "rb", buffering=0) as answer:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([answer], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return ("timeout", None)
            piece = answer.read(1 << 20)
            if not piece:
                break
            received += piece
    os.waitpid(pid, 0)
    if len(received) < _LENGTH.size:
        return ("failed", None)
    return pickle.loads(bytes(received[_LENGTH.size :]))


def _serve() -> None:
    """The reader process: one file at a time, until the app closes its standard input."""
    import webapp.chat.files.inspect  # noqa: F401  (imported once, in every child already)

    while True:
        try:
            work, args, seconds = _receive(sys.stdin.buffer)
        except EOFError:
            return
        _send(sys.stdout.buffer, _one(work, args, seconds))


if __name__ == "__main__":
    _serve()
