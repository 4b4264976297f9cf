"""`webapp serve` as a child process, for the tests that need the real server on real
sockets (the serve and cross-worker tests, the browser tests). One place knows how to
start it, tell when it is up, say why it died, and stop or kill it: every log file and
process it opens is closed and waited for, as pytest's `filterwarnings = error` turns a
leaked one into a failure.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

WEBAPP = Path(sys.executable).parent / "webapp"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
PORT_MOVES = 3
"""How often a server that lost its port to another process moves to a new one: a free
port is only free until someone binds it, and other suites share this machine."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def webapp_serve(port: int) -> list[str]:
    """The command as deployed; a test may give another to run the app some other way."""
    return [str(WEBAPP), "serve", "--port", str(port), "--log-level", "warning"]


H11_SERVE = (
    "import sys, uvicorn; from webapp.settings import Settings; "
    "from webapp.web.server import DeadlineH11Protocol, Deadlines, with_deadlines; "
    "settings = Settings(); "
    "deadlines = Deadlines(settings.request_timeout, settings.write_timeout); "
    "uvicorn.run('webapp.asgi:app', port=int(sys.argv[1]), log_level='warning', "
    "http=with_deadlines(DeadlineH11Protocol, deadlines), timeout_keep_alive=1)"
)


def h11_serve(port: int) -> list[str]:
    """What `webapp serve` falls back to without httptools."""
    return [sys.executable, "-c", H11_SERVE, str(port)]


@dataclass(kw_only=True)
class ServerProcess:
    """One server process on `port`, its output appended to `log`; started, stopped and
    started again (same port) as a test needs."""

    name: str
    env: Mapping[str, str]
    log: Path
    port: int = field(default_factory=free_port)
    command: Callable[[int], Sequence[str]] = webapp_serve
    process: subprocess.Popen[bytes] | None = None
    _launched_at: int = field(default=0, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def start(self) -> None:
        self.launch()
        self.wait_until_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (start several, then wait for each)."""
        self._launched_at = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:  # the child keeps its own copy
            log.write(f"---- starting {self.name} on port {self.port}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(self.port), env=dict(self.env), stdout=log, stderr=subprocess.STDOUT
            )

    def wait_until_ready(self) -> None:
        """Poll /healthz; fail at once, with the server's output, if the process dies."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        moves = 0
        # One client for every poll: each new one loads the CA store, some 20 ms of CPU
        # taken from the starting server every 50 ms.
        with httpx.Client(timeout=1) as probe:
            while not (up := self._answers(probe, may_move=moves < PORT_MOVES)):
                if up is None:  # it lost its port: again, on another
                    moves += 1
                    self.port = free_port()
                    self.launch()
                    continue
                if time.monotonic() > deadline:
                    self.kill()
                    pytest.fail(
                        f"{self.name} did not answer /healthz in {START_TIMEOUT:g} s:\n"
                        f"{self.output()}"
                    )
                time.sleep(0.05)

    def _answers(self, probe: httpx.Client, *, may_move: bool = False) -> bool | None:
        """Whether the server answers /healthz; fails at once, with its output, if it died
        (unless it died because its port was taken and `may_move`: then None)."""
        assert self.process is not None
        code = self.process.poll()
        if code is not None and may_move and self._port_was_taken():
            self.process = None
            return None
        if code is not None:
            pytest.fail(f"{self.name} exited with status {code}:\n{self.output()}")
        try:
            return probe.get(self.url + "/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def _port_was_taken(self) -> bool:
        with self.log.open("rb") as log:
            log.seek(self._launched_at)
            return b"address already in use" in log.read()

    def stop(self) -> None:
        """Shut down gracefully (SIGTERM), killing it if it takes too long."""
        self._end(graceful=True)

    def kill(self) -> None:
        """Die at once (SIGKILL): no shutdown hook runs, as when a machine loses power."""
        self._end(graceful=False)

    def _end(self, *, graceful: bool) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        if graceful:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
                return
            except subprocess.TimeoutExpired:
                pass
        process.send_signal(signal.SIGKILL)
        process.wait()


@contextmanager
def serving(
    env: Mapping[str, str],
    log_dir: Path,
    command: Callable[[int], Sequence[str]] = webapp_serve,
) -> Iterator[str]:
    """The URL of a server started on a free port with `env`, once it answers /healthz;
    stopped on leaving. Its output goes to `serve-{port}.log` in `log_dir`, and is what a
    failure shows if the server exits before it answers."""
    port = free_port()
    server = ServerProcess(
        name="webapp serve", env=env, log=log_dir / f"serve-{port}.log", port=port, command=command
    )
    try:
        server.start()
        yield server.url
    finally:
        server.stop()
