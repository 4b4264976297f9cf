"""Stopping a process's background tasks (the flusher, the notice listener, the poll)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` and wait until it has ended; its cancellation is not the caller's."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
