"""/v1/chat/completions: the echoed (or forced) reply, whole or streamed, tool calls
included, with the engine's own usage and timings."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse

from tests.upstream.admission import Admission
from tests.upstream.cache import _Prefill
from tests.upstream.faults import _error
from tests.upstream.sse import _Abort, _EventStream, _pieces, _sse, _verbose
from tests.upstream.vocab import _content_text


def _arguments_for(tool: dict[str, Any]) -> str:
    """Deterministic arguments filling the tool's required parameters by type."""
    function = tool.get("function") or {}
    schema = function.get("parameters") or {}
    properties = schema.get("properties") or {}
    samples = {"string": "echo", "integer": 1, "number": 1, "boolean": True, "array": []}
    arguments = {
        name: samples.get((properties.get(name) or {}).get("type", ""))
        for name in schema.get("required") or []
    }
    return json.dumps(arguments)


class ChatEndpoint(Admission):
    """/v1/chat/completions."""

    async def _chat(self, request: Request) -> Any:
        generation = self._generation
        admitted = await self._admit(request)
        if isinstance(admitted, JSONResponse):
            return admitted
        body, model, window = admitted
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' must be a non-empty array.", param="messages")
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            return _error(400, "Every message needs a 'role'.", param="messages")
        tools = body.get("tools") or None
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        tokens = self.tokenize_chat(messages, tools)
        if len(tokens) + (max_tokens or 0) > window:
            return self._chat_overflow(window, len(tokens), max_tokens)
        engine = self.engine
        slot = body.get("id_slot") if engine == "llamacpp" else None
        prefill = self._prefill(model, tokens, generation, slot if isinstance(slot, int) else None)

        last = messages[-1]
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        last_said = _content_text(last_user.get("content"))[:40] if last_user else ""
        tool_call: dict[str, Any] | None = None
        if (
            tools
            and last.get("role") == "user"
            and "use tool" in _content_text(last.get("content")).lower()
        ):
            tool = tools[0]
            tool_call = {
                "id": f"call_{self._next_id()}",
                "type": "function",
                "function": {
                    "name": (tool.get("function") or {}).get("name", "tool"),
                    "arguments": _arguments_for(tool),
                },
            }
            text, finish = "", "tool_calls"
            completion_tokens = self.count(tool_call["function"]["name"]) + self.count(
                tool_call["function"]["arguments"]
            )
        else:
            default = f"Echo from {model}: I saw {len(messages)} messages; last said: {last_said}"
            text, completion_tokens, finish = self._reply_text(default, max_tokens)

        usage = self._usage(engine, prefill, completion_tokens)
        ident = f"chatcmpl-{self._next_id()}"
        created = int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_call is not None:
                message["tool_calls"] = [tool_call]
            else:
                message["content"] = text
            if prefill.seconds:
                await asyncio.sleep(prefill.seconds)
            answer: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
                ],
                "usage": usage,
            }
            if engine == "llamacpp":
                answer["timings"] = self._timings(prefill, completion_tokens, 0.0)
            return JSONResponse(answer)
        options = body.get("stream_options") or {}
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        if engine == "llama-cpp-python":
            include_usage = False  # it ignores stream_options: no usage on streamed answers
        with self._lock:
            verbose, portal = self._verbose_frames, self._portal_page
        if portal:
            return HTMLResponse("<html><body>Sign in to continue</body></html>")
        events = self._chat_events(
            ident,
            created,
            model,
            text,
            tool_call,
            finish,
            {key: value for key, value in usage.items() if value is not None},
            include_usage,
            prefill,
            engine == "llamacpp",
            engine == "llamacpp" and body.get("return_progress") is True,
        )
        return _EventStream(_verbose(events) if verbose else events)

    async def _chat_events(
        self,
        ident: str,
        created: int,
        model: str,
        text: str,
        tool_call: dict[str, Any] | None,
        finish: str,
        usage: dict[str, Any],
        include_usage: bool,
        prefill: _Prefill,
        timed: bool,
        progress: bool = False,
    ) -> AsyncIterator[bytes]:
        """The stream; `timed` (llama.cpp) adds `timings` to its last chunk: the usage
        chunk when usage was asked for, else the one with finish_reason. With `progress`
        (llama.cpp asked for `return_progress`) the prompt's reading comes first."""

        def event(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": delta,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
            }
            if include_usage:
                data["usage"] = None
            return data

        def chunk(delta: dict[str, Any]) -> bytes:
            return _sse(event(delta))

        deltas: list[dict[str, Any]]
        if tool_call is not None:
            arguments = tool_call["function"]["arguments"]
            half = len(arguments) // 2
            deltas = [
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": tool_call["id"],
                            "type": "function",
                            "function": {"name": tool_call["function"]["name"], "arguments": ""},
                        }
                    ]
                },
                {"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
            ]
        else:
            deltas = [{"content": piece} for piece in _pieces(text)]

        break_after = self._take_break()
        if progress:
            async for reading in self._progress_events(event({"role": "assistant"}), prefill):
                yield reading
        elif prefill.seconds:
            await asyncio.sleep(prefill.seconds)
        generating = time.perf_counter()
        yield chunk({"role": "assistant", "content": "" if tool_call is None else None})
        for sent, delta in enumerate(deltas):
            if break_after is not None and sent >= break_after:
                raise _Abort
            delay = self.chunk_delay
            if delay:
                await asyncio.sleep(delay)
            yield chunk(delta)
            if sent == 0:
                stall = self._take_stall(streaming=True, before=False)
                if stall:
                    await self._stalled(stall)
        if break_after is not None:
            raise _Abort
        last = [event({}, finish)]
        if include_usage:
            last.append(
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        if timed:
            predicted_s = time.perf_counter() - generating
            last[-1]["timings"] = self._timings(prefill, usage["completion_tokens"], predicted_s)
        for data in last:
            yield _sse(data)
        yield _sse("[DONE]")

    async def _progress_events(
        self, opening: dict[str, Any], prefill: _Prefill
    ) -> AsyncIterator[bytes]:
        """llama.cpp's reading of the prompt: a chunk per batch, each the opening chunk (an
        assistant delta with no content) with `prompt_progress` {total, cache, processed,
        time_ms}; `processed` counts the cached tokens too. The prefill's time is spread
        over them; `hold_after_progress` then holds the stream until `end_stalls`."""
        total, cached = prefill.prompt_tokens, prefill.cached_tokens
        opening["choices"][0]["delta"]["content"] = None
        steps = [*range(cached + self.progress_batch, total, self.progress_batch), total]
        started = time.perf_counter()
        for processed in steps:
            if prefill.seconds:
                await asyncio.sleep(prefill.seconds / len(steps))
            elapsed = int((time.perf_counter() - started) * 1000)
            reading = {"total": total, "cache": cached, "processed": processed, "time_ms": elapsed}
            yield _sse(opening | {"prompt_progress": reading})
        if self.hold_after_progress:
            await self._stalled(60)
