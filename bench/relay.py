"""The floor for `bench.load`: the least an app built like ours can do for a streamed send.

One route, `POST /relay`, streams the upstream's answer back with the parts the real app
streams with: Litestar on `webapp serve`'s uvicorn protocol, the app's OpenAI provider
(its client shards, httpx-sse), and the app's SSE framing and response. No accounts, no
database, no bound, no answer task or channel. Measured beside the app in the same
rounds, it separates what the framework and the HTTP client cost on this machine from
what the app's own work costs: a target below this floor cannot be met by the app's
code, only by another stack or another core.

    BENCH_RELAY_UPSTREAM=http://127.0.0.1:8001/v1 python -m bench.relay --port 8002
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

from litestar import Litestar, post
from litestar.params import JSONBody
from litestar.types import ASGIApp

from webapp.chat.answers import Event
from webapp.chat.api import sse_frame
from webapp.llm.providers.openai import OpenAIProvider
from webapp.web.events import event_stream

MODEL = os.environ.get("BENCH_RELAY_MODEL", "large")
SYSTEM = os.environ.get("BENCH_RELAY_SYSTEM", "You are a helpful assistant.")

_provider: OpenAIProvider | None = None


def provider() -> OpenAIProvider:
    global _provider
    if _provider is None:
        _provider = OpenAIProvider(os.environ["BENCH_RELAY_UPSTREAM"], timeout=60)
    return _provider


async def _frames(content: str, max_tokens: int | None) -> AsyncIterator[bytes]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
    async for chunk in provider().stream_chat(MODEL, messages, max_tokens=max_tokens):
        if chunk.text:
            yield sse_frame(Event("delta", {"text": chunk.text}))
    yield sse_frame(Event("done", {}))


@post("/relay", status_code=201)
async def relay(data: JSONBody[dict[str, Any]]) -> ASGIApp:
    limit = data.get("max_tokens")
    frames = _frames(str(data.get("content", "")), limit if isinstance(limit, int) else None)
    return event_stream(frames, status_code=201)


async def _close() -> None:
    if _provider is not None:
        await _provider.aclose()


app = Litestar([relay], on_shutdown=[_close])


def main() -> None:
    """Serve the floor as `webapp serve` serves the app: same uvicorn protocol, one worker."""
    import argparse

    import uvicorn

    from webapp.web.server import http_protocol

    parser = argparse.ArgumentParser(prog="python -m bench.relay")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        "bench.relay:app",
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        http=http_protocol(),
    )


if __name__ == "__main__":
    main()
