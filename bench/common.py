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
