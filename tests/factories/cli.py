"""The `webapp` command line, run as an operator runs it: its arguments, its environment,
its standard input, and what it prints and returns.

`run` calls the command's own entry point (`webapp.cli.main`) in this process, on a
thread of its own, with the environment and standard streams it would have in a shell:
each command starts from the environment it is given, as in a child process, while the
suite is spared a second interpreter importing the app (about a second of CPU a command
on the 2-core machine, some thirty commands in the suite). `run_in_child` starts a real
child process, for the tests that are about the command as a shell starts it."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

from webapp.cli import main

WEBAPP = [sys.executable, "-m", "webapp.cli"]
"""The `webapp` command, run by this interpreter."""

_ONE_AT_A_TIME = threading.Lock()
"""The environment and the standard streams are the process's: one command at a time."""


@contextlib.contextmanager
def _environment(added: dict[str, str]) -> Iterator[None]:
    kept = dict(os.environ)
    os.environ.update(added)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(kept)


def run(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`webapp *args` with `env` added to this process's environment and `stdin` its input
    (a password read with `--password-stdin`); its exit status as a process would have it.
    The command runs on a thread of its own, so a test may call it from inside a running
    event loop, as it would wait for a child process."""
    out, err = io.StringIO(), io.StringIO()
    status: list[int] = []

    def command() -> None:
        try:
            status.append(main(list(args)))
        except SystemExit as exit:  # argparse's usage errors, as a shell sees them
            code = exit.code
            status.append(code if isinstance(code, int) else 0 if code is None else 1)

    with _ONE_AT_A_TIME, _environment(env or {}):
        saved = sys.stdin, sys.stdout, sys.stderr
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin or ""), out, err
        try:
            thread = threading.Thread(target=command, name="webapp-cli")
            thread.start()
            thread.join(timeout=60)
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved
    if not status:
        raise TimeoutError(f"webapp {' '.join(args)} did not end within 60 s")
    return subprocess.CompletedProcess([*WEBAPP, *args], status[0], out.getvalue(), err.getvalue())


def run_in_child(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`webapp *args` in a child process, with `env` added to this one's environment."""
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        [*WEBAPP, *args], input=stdin, capture_output=True, text=True, env=environment, timeout=60
    )


def run_on(database_url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`webapp *args` on the database at `database_url`; its input is `stdin` and then
    ends, so a command that asks for a password is told there is none."""
    return run(*args, env={"WEBAPP_DATABASE_URL": database_url}, stdin=stdin)
