"""The fake upstream: its state and controls, every endpoint, and the routes to them."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Route

from tests.upstream.chat import ChatEndpoint
from tests.upstream.embeddings import CompletionEndpoints
from tests.upstream.engines import EngineEndpoints
from tests.upstream.vocab import Engine, TokenizerName


class FakeUpstream(EngineEndpoints, ChatEndpoint, CompletionEndpoints):
    """An OpenAI-compatible server on 127.0.0.1 with scriptable faults.

    All control methods are thread-safe: tests call them from their own thread and event
    loop while the server runs in its own.
    """

    def __init__(
        self,
        models: dict[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        engine: Engine = "openai",
        tokenizer: TokenizerName = "cl100k",
        *,
        keep_alive: float = 5.0,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """`keep_alive`: seconds an idle connection stays open (uvicorn's 5 by default,
        as vLLM's server); `tls`: a certificate and its key, to serve https."""
        super().__init__(models, host, port, engine, tokenizer, keep_alive=keep_alive, tls=tls)
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/models", self._list_models, methods=["GET"]),
                # Engines' own endpoints at the server root; each answers only for the
                # engines that have it, and 404s (like Starlette's own) otherwise.
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/extras/tokenize", self._tokenize, methods=["POST"]),
                Route("/props", self._props, methods=["GET"]),
                Route("/slots", self._slots, methods=["GET"]),
                Route("/api/show", self._ollama_show, methods=["POST"]),
                Route("/api/v0/models", self._lmstudio_models, methods=["GET"]),
            ]
        )
