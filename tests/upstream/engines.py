"""The model list and the serving engines' own endpoints at the server root: tokenize,
llama.cpp's /props, Ollama's /api/show, LM Studio's models; each 404s for the engines
that do not have it."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from tests.upstream.admission import Admission
from tests.upstream.faults import _not_found, _vllm_error


class EngineEndpoints(Admission):
    """/v1/models and the engines' own endpoints."""

    # ---- endpoints ---------------------------------------------------------------------

    async def _list_models(self, request: Request) -> JSONResponse:
        await self._record(request)
        vllm = self.engine == "vllm"
        data = []
        for name, window in self.models.items():
            entry: dict[str, Any] = {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "vllm" if vllm else "fake-upstream",
            }
            if vllm:
                entry.update(root=name, parent=None, max_model_len=window)
            elif self.engine == "openai":
                entry["context_window"] = window
            data.append(entry)
        return JSONResponse({"object": "list", "data": data})

    # ---- engines' own endpoints -----------------------------------------------------------

    async def _tokenize(self, request: Request) -> Response:
        """llama.cpp `/tokenize {"content"}`, llama-cpp-python `/extras/tokenize {"input"}`,
        vLLM `/tokenize {"prompt"} | {"messages"}`; each engine only its own."""
        engine, path = self.engine, request.url.path
        if (engine, path) not in (
            ("llamacpp", "/tokenize"),
            ("vllm", "/tokenize"),
            ("llama-cpp-python", "/extras/tokenize"),
        ):
            return _not_found()
        body, _ = await self._record(request)
        delay = self._take_tokenize_stall()
        if delay:
            await asyncio.sleep(delay)
        failure = self._take_tokenize_failure()
        if failure is not None:
            return PlainTextResponse("Internal Server Error (simulated)", failure.status)
        if not isinstance(body, dict):
            return JSONResponse({"detail": "invalid JSON body"}, status_code=400)
        if engine == "llamacpp":
            # Like llama.cpp: a body without "content" is answered with no tokens.
            content = body.get("content")
            tokens = self._vocab().encode(content) if isinstance(content, str) else []
            return JSONResponse({"tokens": tokens})
        if engine == "llama-cpp-python":
            text = body.get("input")
            if not isinstance(text, str):
                return JSONResponse(
                    {"detail": [{"type": "missing", "loc": ["body", "input"]}]}, status_code=422
                )
            return JSONResponse({"tokens": self._vocab().encode(text)})
        return self._vllm_tokenize(body)

    def _vllm_tokenize(self, body: dict[str, Any]) -> JSONResponse:
        model = body.get("model")
        window = self._window(model) if isinstance(model, str) else None
        if isinstance(model, str) and window is None:
            return self._model_not_found(model)
        if window is None:  # vLLM serves one model; no "model" means that one
            window = next(iter(self.models.values()), 0)
        if isinstance(body.get("prompt"), str):
            tokens = self._vocab().encode(body["prompt"])
        elif isinstance(body.get("messages"), list):
            tokens = self.tokenize_chat(body["messages"])
        else:
            return _vllm_error(
                400,
                "[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required'}]",
                "BadRequestError",
            )
        return JSONResponse({"count": len(tokens), "tokens": tokens, "max_model_len": window})

    async def _props(self, request: Request) -> Response:
        """llama.cpp `/props`: one model per server, so its n_ctx is the first model's."""
        if self.engine != "llamacpp":
            return _not_found()
        await self._record(request)
        name, window = next(iter(self.models.items()), ("none", 0))
        return JSONResponse(
            {
                "default_generation_settings": {"n_ctx": window, "params": {"n_predict": -1}},
                "total_slots": self.slot_count,
                "model_path": f"/models/{name}.gguf",
                "chat_template": "{{ messages }}",
            }
        )

    async def _slots(self, request: Request) -> Response:
        """llama.cpp `/slots`: one object per slot (the fields a client may read), or its
        501 when started with `--no-slots`."""
        if self.engine != "llamacpp":
            return _not_found()
        await self._record(request)
        if not self.slots_endpoint:
            error = {
                "code": 501,
                "message": "This server does not support slots endpoint.",
                "type": "not_supported_error",
            }
            return JSONResponse({"error": error}, status_code=501)
        window = next(iter(self.models.values()), 0)
        slots = [
            {"id": slot, "id_task": -1, "n_ctx": window, "is_processing": False}
            for slot in range(self.slot_count)
        ]
        return JSONResponse(slots)

    async def _ollama_show(self, request: Request) -> Response:
        """Ollama `/api/show`: the model's own context_length in model_info, and num_ctx in
        the `parameters` text only when one was set (set_num_ctx)."""
        if self.engine != "ollama":
            return _not_found()
        body, _ = await self._record(request)
        model = body.get("model") if isinstance(body, dict) else None
        window = self.models.get(model) if isinstance(model, str) else None
        if not isinstance(model, str) or window is None:
            return JSONResponse({"error": f"model '{model}' not found"}, status_code=404)
        with self._lock:
            num_ctx = self._num_ctx.get(model)
        parameters = 'stop "<|im_end|>"\ntemperature 0.7'
        if num_ctx is not None:
            parameters = f"num_ctx {num_ctx}\n{parameters}"
        return JSONResponse(
            {
                "modelfile": f"FROM {model}",
                "parameters": parameters,
                "template": "{{ .Prompt }}",
                "details": {"format": "gguf", "family": "qwen2"},
                "model_info": {
                    "general.architecture": "qwen2",
                    "general.parameter_count": 494032768,
                    "qwen2.context_length": window,
                    "qwen2.embedding_length": 896,
                },
            }
        )

    async def _lmstudio_models(self, request: Request) -> Response:
        """LM Studio `/api/v0/models`: loaded models carry the context they were loaded
        with, beside the model's maximum (here twice the loaded one)."""
        if self.engine != "lmstudio":
            return _not_found()
        await self._record(request)
        data = [
            {
                "id": name,
                "object": "model",
                "type": "llm",
                "state": "loaded",
                "max_context_length": window * 2,
                "loaded_context_length": window,
            }
            for name, window in self.models.items()
        ]
        return JSONResponse({"object": "list", "data": data})
