"""The processes a benchmark runs: the fake upstream and `webapp serve`, on free ports,
pinned to cores, and what they cost in CPU."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx

HOST = "127.0.0.1"
WEBAPP = Path(sys.executable).parent / "webapp"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def pin(pid: int, core_set: set[int]) -> None:
    if core_set and hasattr(os, "sched_setaffinity"):
        with suppress(OSError):
            os.sched_setaffinity(pid, core_set)


def memory_mb(pid: int) -> tuple[float, float]:
    """A process's resident memory now and at its peak (VmRSS, VmHWM), in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    now, peak = (int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))
    return now, peak


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its descendants, from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                todo.extend(int(child) for child in children)
        except (OSError, ValueError):
            continue
    return total


def wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within 60 s")


@contextmanager
def upstream(folder: Path, core_set: set[int], chunk_delay: float, reply: str) -> Iterator[int]:
    """`tests.upstream` on a free port, answering every call with `reply`, a word a chunk."""
    port = free_port()
    log = folder / f"upstream-{port}.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.upstream",
            "--port",
            str(port),
            "--chunk-delay",
            str(chunk_delay),
            "--reply",
            reply,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    pin(process.pid, core_set)
    try:
        wait_until_up(f"http://{HOST}:{port}/v1/models", process, log)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def webapp(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(WEBAPP), *args], env=env, input=stdin, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"webapp {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


@contextmanager
def server(
    env: dict[str, str], folder: Path, workers: int, core_set: set[int]
) -> Iterator[tuple[int, int]]:
    """`webapp serve` on a free port: (port, pid)."""
    port = free_port()
    log = folder / f"serve-{port}.log"
    process = subprocess.Popen(
        [
            str(WEBAPP),
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    pin(process.pid, core_set)
    try:
        wait_until_up(f"http://{HOST}:{port}/healthz", process, log)
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=20)
        lines = log.read_text().splitlines()
        errors = [n for n, line in enumerate(lines) if "ERROR" in line]
        if errors:
            print(f"  the server logged {len(errors)} errors; the first:")
            first = lines[errors[0] :]
            end = next(
                (n for n, line in enumerate(first[2:], 2) if not line.startswith((" ", "\t"))),
                len(first) - 1,
            )
            print("\n".join("    " + line for line in [*first[:2], *first[end - 6 : end + 1]]))


def new_conversation(port: int, token: str, configuration: str) -> str:
    """A conversation of `token`'s user on the server at `port`, through the API."""
    response = httpx.post(
        f"http://{HOST}:{port}/api/conversations",
        json={"configuration": configuration},
        headers={"Authorization": f"Bearer {token}"},
    )
    response.raise_for_status()
    return str(response.json()["id"])
