"""The provider's tests run twice: on asyncio's loop and on uvloop, the loop `webapp
serve` runs. The provider's network layer (`webapp/llm/providers/network.py`) is plain
asyncio, and the two loops' transports are alike, not the same: uvloop's are no
subclasses of asyncio's, and set TCP_NODELAY where asyncio may not."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
