"""The `webapp` command line, run in a child process as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys

WEBAPP = [sys.executable, "-m", "webapp.cli"]
"""The `webapp` command, run by this interpreter."""


def run(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`webapp *args` in a child process, with `env` added to this one's environment and
    `stdin` its input (a password read with `--password-stdin`)."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [*WEBAPP, *args], input=stdin, capture_output=True, text=True, env=environment, timeout=60
    )


def run_on(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`webapp *args` on the database at `database_url`; its input is `stdin` and then
    ends, so a command that asks for a password is told there is none."""
    return run(*args, env={"WEBAPP_DATABASE_URL": database_url}, stdin=stdin)
