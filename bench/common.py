"""What every benchmark shares: one pinned core, a migrated database, a report line."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

from webapp.migrate import upgrade


def pin_to_one_core() -> str:
    """Measure on one core, as the targets are stated; returns which one."""
    if hasattr(os, "sched_setaffinity"):
        core = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def run(main: Coroutine[Any, Any, None]) -> None:
    """On the event loop `webapp serve` runs on: uvicorn picks uvloop when it is there."""
    uvloop.run(main)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def fresh_sqlite(path: Path) -> str:
    path.unlink(missing_ok=True)
    url = f"sqlite+aiosqlite:///{path}"
    upgrade(url)
    return url


async def timed(run: Callable[[], Awaitable[object]], repeats: int, warmup: int = 5) -> list[float]:
    """Milliseconds per call, after a warm-up."""
    for _ in range(warmup):
        await run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return f"median {statistics.median(samples):.2f} ms, p90 {p90:.2f} ms (n={len(samples)})"


def git_revision() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


Row = dict[str, Any]


def with_forks(
    turns: list[tuple[Row, Row]], forks: int, *, pin_alternatives: bool = False
) -> list[Row]:
    """The rows of `turns` (the active branch, oldest first) with `forks` fork points spread
    along it, numbered as the app numbers them: before each, the turn that was there first
    (the same question, an earlier answer) stays on record, and the active branch leaves it
    through a run of its own (`parent_seq` on the run's first row), as a regenerate leaves
    it. The active branch ends at the newest row, as after a send."""
    every = len(turns) // (forks + 1)
    points = {every * (k + 1) for k in range(forks)}
    rows: list[Row] = []
    seq = 1
    for index, (user, answer) in enumerate(turns):
        parent = None
        if index in points:
            earlier = {"content": "An earlier answer: " + answer["content"]}
            rows += [
                {**user, "seq": seq, "parent_seq": None, "pinned": pin_alternatives},
                {**answer, **earlier, "seq": seq + 1, "parent_seq": None},
            ]
            parent, seq = seq - 1, seq + 2
        rows += [
            {**user, "seq": seq, "parent_seq": parent},
            {**answer, "seq": seq + 1, "parent_seq": None},
        ]
        seq += 2
    return rows


def active_path(rows: list[Row]) -> list[Row]:
    """The branch ending at the newest row, walked row by row through the parent pointers
    (the naive way, and a check on the bounded one)."""
    by_seq = {row["seq"]: row for row in rows}
    path, seq = [], max(by_seq)
    while seq > 0:
        row = by_seq[seq]
        path.append(row)
        seq = row["parent_seq"] if row["parent_seq"] is not None else seq - 1
    return path[::-1]
