"""The floor for `bench.load`: a streamed send relayed the plain way.

One route, `POST /relay`, asks the upstream for a streamed chat completion with one
shared `httpx.AsyncClient` and relays each piece of text as an SSE `delta` event (then
`done`) through Litestar's own `Stream` response, served by uvicorn with its defaults
(uvloop and httptools where installed, as `webapp serve` runs). No accounts, database,
bound, answer task or pacing, and none of the app's own streaming parts: what is left
is what any Litestar app that relays a model costs on this machine; the app is measured
beside it, in the same rounds, against targets stated as multiples of it.

    BENCH_RELAY_UPSTREAM=http://127.0.0.1:8001/v1 python -m bench.relay --port 8002
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
from litestar import Litestar, post
from litestar.params import JSONBody
from litestar.response import Stream

MODEL = os.environ.get("BENCH_RELAY_MODEL", "large")
SYSTEM = os.environ.get("BENCH_RELAY_SYSTEM", "You are a helpful assistant.")
DONE = b"event: done\r\ndata: {}\r\n\r\n"

_client: httpx.AsyncClient | None = None


def client() -> httpx.AsyncClient:
    """One client for every request, a connection of its own for each stream, closed at
    the stream's end. Kept connections would be the plain way too, but httpcore's pool
    walks every connection it holds for each request it queues: with the 200 a burst
    leaves behind, the next burst spent seconds of CPU there before its first request
    went out (py-spy: 45% of the relay's samples), and the floor measured the pool,
    not the relay. A new local connection costs a fraction of that."""
    global _client
    if _client is None:
        _client = httpx.AsyncClient(
            base_url=os.environ["BENCH_RELAY_UPSTREAM"],
            timeout=60,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        )
    return _client


def _text_of(line: str) -> str | None:
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    choices = json.loads(line[6:]).get("choices") or [{}]
    text = choices[0].get("delta", {}).get("content")
    return text if isinstance(text, str) and text else None


async def _frames(content: str, max_tokens: int | None) -> AsyncIterator[bytes]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}],
        "stream": True,
        **({"max_tokens": max_tokens} if max_tokens is not None else {}),
    }
    async with client().stream("POST", "/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            text = _text_of(line)
            if text is not None:
                yield f"event: delta\r\ndata: {json.dumps({'text': text})}\r\n\r\n".encode()
    yield DONE


@post("/relay", status_code=201)
async def relay(data: JSONBody[dict[str, Any]]) -> Stream:
    limit = data.get("max_tokens")
    frames = _frames(str(data.get("content", "")), limit if isinstance(limit, int) else None)
    return Stream(frames, media_type="text/event-stream", status_code=201)


async def _close() -> None:
    if _client is not None:
        await _client.aclose()


app = Litestar([relay], on_shutdown=[_close])


def main() -> None:
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m bench.relay")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run("bench.relay:app", host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
