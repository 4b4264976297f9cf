"""What clients that ask for an export and never read it cost the server (issue 43).

A real `webapp serve` process (SQLite, one worker, pinned to its own core) holds a
conversation of 20,000 short messages (a JSON export of some 6.6 MB: the shape that was
read whole per client before exports were batched by rows). Then:

- its resident memory (RSS) idle (a server started afresh after the import, which ran
  on a server of its own), then after one export read whole;
- 40 clients ask for the export at once and read nothing (a receive window of 4 KiB, as
  `tests/test_resource_bounds.py` makes them): the peak RSS while they are held, sampled
  until the server has done all it will for them (its CPU quiet for a second, or 90 s),
  and the slowest `/healthz` meanwhile (target: the peak under 2x the idle figure). The
  caps are off here (`WEBAPP_EXPORTS_PER_USER=0`), so all 40 are held: what is measured
  is what each held export costs, not the cap;
- the same 40 with the default cap: how many are held and how many refused (429).

    python -m bench.exports
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.common import machine
from bench.processes import HOST, cores, cpu_seconds, memory_mb, pin, server, webapp

MESSAGES = 20_000
CLIENTS = 40
HELD_AT_MOST = 90.0
"""Seconds the clients are held at most (the server watched meanwhile)."""
QUIET = 0.05
"""The server's share of a core under which it has done all it will for the clients."""
TARGET_RATIO = 2.0
PASSWORD = "bench-password-0123456789"


def export_of(messages: int) -> dict[str, object]:
    """An export of `messages` short messages, as a long chat of quick exchanges."""
    return {
        "format": "webapp.conversation",
        "version": 1,
        "conversation": {"title": "Quick exchanges"},
        "messages": [
            {
                "seq": seq,
                "role": "user" if seq % 2 else "assistant",
                "content": f"message {seq}: " + "a short line of chat. " * 6,
            }
            for seq in range(1, messages + 1)
        ],
    }


def stalled(port: int, path: str, token: str) -> socket.socket:
    """A client that asks for `path` and takes nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((HOST, port))
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    return sock


def status_of(sock: socket.socket) -> int:
    """The status of the response that has begun on `sock` (peeked, nothing taken)."""
    sock.settimeout(30)
    head = sock.recv(12, socket.MSG_PEEK)
    return int(head.split()[1])


@dataclass
class Held:
    idle_mb: float
    one_export_mb: float
    peak_mb: float
    healthz_ms: float
    statuses: dict[int, int]


def hold(port: int, pid: int, path: str, token: str) -> Held:
    """Read the export once (warm), then hold `CLIENTS` clients that read nothing."""
    with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=60) as api:
        api.get("/healthz").raise_for_status()
        idle, _ = memory_mb(pid)
        whole = api.get(path, headers={"Authorization": f"Bearer {token}"})
        whole.raise_for_status()
        one_export, _ = memory_mb(pid)
        clients = [stalled(port, path, token) for _ in range(CLIENTS)]
        try:
            statuses: dict[int, int] = {}
            for sock in clients:
                code = status_of(sock)
                statuses[code] = statuses.get(code, 0) + 1
            peak, slowest = one_export, 0.0
            until = time.monotonic() + HELD_AT_MOST
            busy = (time.monotonic(), cpu_seconds(pid))
            while time.monotonic() < until:
                peak = max(peak, memory_mb(pid)[0])
                started = time.perf_counter()
                api.get("/healthz").raise_for_status()
                slowest = max(slowest, time.perf_counter() - started)
                time.sleep(0.05)
                now = (time.monotonic(), cpu_seconds(pid))
                if now[0] - busy[0] >= 1.0:
                    if (now[1] - busy[1]) / (now[0] - busy[0]) < QUIET:
                        break
                    busy = now
        finally:
            for sock in clients:
                sock.close()
    return Held(idle, one_export, peak, slowest * 1000, statuses)


def measure(folder: Path, app_cores: set[int]) -> None:
    env = {
        **os.environ,
        "WEBAPP_SECRET_KEY": secrets.token_hex(16),
        "WEBAPP_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'exports.db'}",
        "WEBAPP_IMPORT_LIMIT": "0",
        "WEBAPP_IMPORT_LIMIT_BYTES": "0",
        "WEBAPP_WRITE_TIMEOUT": "120",  # the clients are held for the whole measure
    }
    webapp(env, "migrate")
    webapp(env, "user", "create", "reader", "--password-stdin", stdin=PASSWORD)
    token = webapp(env, "token", "create", "reader")
    body = json.dumps(export_of(MESSAGES)).encode()
    auth = {"Authorization": f"Bearer {token}"}
    with server(env, folder, 1, app_cores) as (port, _):  # the import, on a server of its own
        imported = httpx.post(
            f"http://{HOST}:{port}/api/conversations/import",
            content=body,
            headers={**auth, "Content-Type": "application/json"},
            timeout=600,
        )
        imported.raise_for_status()
        path = f"/api/conversations/{imported.json()['id']}/export"
        size = len(httpx.get(f"http://{HOST}:{port}{path}", headers=auth, timeout=600).content)
    for cap in ("0", "3"):
        with server({**env, "WEBAPP_EXPORTS_PER_USER": cap}, folder, 1, app_cores) as (port, pid):
            held = hold(port, pid, path, token)
        ratio = held.peak_mb / held.idle_mb
        verdict = "met" if ratio < TARGET_RATIO else "MISSED"
        label = "no cap" if cap == "0" else f"WEBAPP_EXPORTS_PER_USER={cap}"
        print(
            f"  {label}: {CLIENTS} non-reading clients of a {size / 2**20:.1f} MB export "
            f"({MESSAGES:,} messages): RSS idle {held.idle_mb:.0f} MB, after one export "
            f"{held.one_export_mb:.0f} MB, peak while held {held.peak_mb:.0f} MB "
            f"({ratio:.2f}x idle; target < {TARGET_RATIO:g}x: {verdict}); slowest /healthz "
            f"{held.healthz_ms:.0f} ms; responses by status {held.statuses}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.exports", description=__doc__)
    parser.parse_args(argv)
    available = cores()
    app_cores = {available[0]} if len(available) > 1 else set()
    pin(os.getpid(), set(available[1:]) if len(available) > 1 else set())
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    print("SQLite, one worker, exports that are never read:")
    with tempfile.TemporaryDirectory() as tmp:
        measure(Path(tmp), app_cores)


if __name__ == "__main__":
    main()
