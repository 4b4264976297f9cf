"""`webapp serve` as a child process, for the tests that need the real server on real
sockets. One place knows how to start it, tell when it is up, say why it died, and stop
it: every log file and process it opens is closed and waited for, as pytest's
`filterwarnings = error` turns a leaked one into a failure.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.browser.conftest import free_port

WEBAPP = Path(sys.executable).parent / "webapp"
START_TIMEOUT = 30.0


def webapp_serve(port: int) -> list[str]:
    """The command as deployed; a test may give another to run the app some other way."""
    return [str(WEBAPP), "serve", "--port", str(port), "--log-level", "warning"]


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
    log_path = log_dir / f"serve-{port}.log"
    with log_path.open("wb") as log:  # the child keeps its own copy
        process = subprocess.Popen(command(port), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_answering(process, url, log_path)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)


def wait_until_answering(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"webapp serve exited: {log_path.read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    pytest.fail(f"webapp serve did not answer in {START_TIMEOUT:g} s")
