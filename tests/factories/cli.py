"""The `webapp` command line, run in a child process as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys

WEBAPP = [sys.executable, "-m", "webapp.cli"]
"""The `webapp` command, run by this interpreter."""


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`webapp *args` in a child process, with `env` added to this one's environment."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [*WEBAPP, *args], capture_output=True, text=True, env=environment, timeout=60
    )
