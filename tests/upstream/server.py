"""Serving a Starlette app with uvicorn in a daemon thread: the fakes' lifecycle."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette

from tests.upstream.sse import _QuietAbort


class ServedApp:
    """A Starlette app (`self.app`) served by uvicorn on `host`:`port` in a daemon thread:
    the fakes' lifecycle. `port` 0 picks a free port, known once started."""

    SERVED = "fake server"
    """What the thread and a failure to start call it."""

    host: str
    port: int
    app: Starlette
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None
    _socket: socket.socket | None = None

    def _bind(self) -> socket.socket:
        # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on sockets whose
        # proto says TCP, and without it Nagle and delayed ACKs hold each kept
        # connection's first body chunk back ~40 ms.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._socket = sock
        return sock

    def _uvicorn_options(self) -> dict[str, Any]:
        """uvicorn settings beyond the quiet, single-loop ones every fake takes."""
        return {}

    def _uvicorn(self) -> uvicorn.Server:
        logging.getLogger("uvicorn.error").addFilter(_QuietAbort())
        config = uvicorn.Config(
            self.app,
            log_config=None,  # leave the process's logging set-up alone
            log_level="warning",
            access_log=False,
            lifespan="off",
            loop="asyncio",
            http="h11",
            ws="none",
            timeout_graceful_shutdown=1,
            **self._uvicorn_options(),
        )
        return uvicorn.Server(config)

    def start(self) -> Self:
        """Serve in a daemon thread; returns once the server accepts connections."""
        if self._thread is not None:
            return self
        sock = self._bind()
        self._server = self._uvicorn()
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"{self.SERVED.replace(' ', '-')}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {self.SERVED} did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
