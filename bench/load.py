"""Benchmark: hundreds of concurrent streamed sends over real HTTP (issues 13 and 23).

A real `webapp serve` process streams answers from `tests/upstream/` running in a
process of its own (60-token answers, 20 ms between chunks). For each load N, N
clients send at once, each into a conversation of its own; the same N requests go
straight to the upstream, and through the floor (`bench.relay`: one Litestar route that
relays the upstream with httpx and Litestar's `Stream`, with no accounts, database or
bound), round by round, so all sides see the same machine at nearly the same moment.
Reported per side: time to first token (p50/p99), the gap between chunks (p99),
failures; for the app and the floor also their CPU seconds per answer, read from /proc
for the server's processes, and the app's ratios to the floor taken within each round.
Then single sends, one at a time, each paired with a direct request and a floor request:
the median of the paired differences is what each adds to the first token. Then
admission: 200 sends at once whose answers wait (the time until the last is admitted,
and the CPU a send). Then pages following one long answer (`bench.page_watchers`: the
bytes a page is sent against the answer's rendering, and `/healthz` while 100 pages
follow it). Then N = 200 with `--workers 2` on PostgreSQL (a database of its
own, created and dropped here), and two servers on that database, one writing answers
and the other following them (`bench.watchers`: the cross-worker delay, and what 100
idle watchers cost). Each figure is taken per round; the medians of the rounds are
printed, so one disturbed round on a shared machine moves them little.

The targets printed are issue 23's: at N = 200 the app's TTFT p99 and CPU per answer
each within 2x the floor's, no failure at N = 500, a single send adding at most the
floor's figure + 2 ms, a page sent at most 2x the answer's rendering, and `/healthz`
within 50 ms while 100 pages follow an answer.

Everything is set up the way a deployment would: `webapp migrate`, `webapp user
create`, `webapp token create`, conversations through the API. The rate limit stays on,
raised in the settings (and spread over several users) so that it is checked on every
send but never reached: this measures streaming, not the limiter.

    make bench-load                      # everything, two to five minutes
    python -m bench.load --loads 200 --no-postgres --profile /tmp/serve.txt  # py-spy
    BENCH_PROFILE_RATE=1000 python -m bench.load --loads "" --pairs 300 --profile ...
    python -m bench.load --single-only --pairs 60   # only the single sends, a minute
    python -m bench.load --loads "" --pairs 0 --no-postgres --profile ...  # admission
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvloop

from bench import page_watchers, watchers
from bench.common import machine
from bench.processes import (
    HOST,
    WEBAPP,
    cores,
    cpu_seconds,
    free_port,
    memory_mb,
    new_conversation,
    pin,
    server,
    upstream,
    wait_until_up,
    webapp,
)
from bench.sse_client import (
    Stream,
    admitted_event,
    app_event,
    post_request,
    stream,
    upstream_event,
)
from tests.postgres import throwaway_database

CHUNK_DELAY = 0.02
QUIET_CHUNK_DELAY = 15.0
"""The second upstream: an answer that says nothing for seconds (idle watchers)."""
REPLY = " ".join(
    [
        "The",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "the",
        "lazy",
        "dog",
        "while",
        "the",
        "small",
        "red",
        "hen",
        "looks",
        "on",
        "and",
        "the",
        "old",
        "grey",
        "cat",
        "sleeps",
        "in",
        "the",
        "warm",
        "sun",
        "near",
        "the",
        "open",
        "door",
        "of",
        "the",
        "barn",
        "where",
        "the",
        "farmer",
        "keeps",
        "his",
        "tools",
        "and",
        "the",
        "children",
        "play",
        "with",
        "a",
        "ball",
        "in",
        "the",
        "long",
        "green",
        "grass",
        "until",
        "the",
        "bell",
        "rings",
        "for",
        "supper",
        "and",
        "everyone",
        "goes",
        "home",
    ][:60]
)
"""The answer every call gets: 60 words, each a token and a chunk of its own."""
QUESTION = "Tell me a short story about a farm."
SYSTEM = "You are a helpful assistant."
UPSTREAM_MODEL = "large"
CLIENTS_PER_USER = 25
RATE_LIMIT = 1000
"""Per user per minute: far above what 25 clients send in the benchmark's rounds."""
PASSWORD = "bench-password-0123456789"


def catalog(path: Path, upstream_port: int, slow_port: int) -> Path:
    path.write_text(
        f"""
[[providers]]
name = "up"
kind = "openai"
base_url = "http://{HOST}:{upstream_port}/v1"
timeout = 60

[[providers]]
name = "slow"
kind = "openai"
base_url = "http://{HOST}:{slow_port}/v1"
timeout = 60

[[models]]
name = "quiet"
provider = "slow"
model_id = "{UPSTREAM_MODEL}"
context_window = 16384
max_output_tokens = 400
tokenizer = "estimate"

[[configurations]]
name = "quiet"
model = "quiet"

[[models]]
name = "bench"
provider = "up"
model_id = "{UPSTREAM_MODEL}"
context_window = 16384
max_output_tokens = 400
tokenizer = "estimate"

[[configurations]]
name = "answer"
model = "bench"
system_prompt = "{SYSTEM}"

[[configurations]]
name = "brief"
model = "bench"
system_prompt = "{SYSTEM}"
max_tokens = 3
"""
    )
    return path


@dataclass
class Client:
    """One benchmark client: its own conversation, its user's token."""

    token: str
    conversation: str
    brief: str
    """A second conversation, for single sends with short answers."""


def set_up_accounts(env: dict[str, str], port: int, clients: int) -> list[Client]:
    """An admin from the CLI; the users through the admin API, a token each from the CLI;
    a conversation per client through the API."""
    webapp(env, "user", "create", "bench-admin", "--admin", "--password-stdin", stdin=PASSWORD)
    admin = webapp(env, "token", "create", "bench-admin", "--admin-scope")
    base = f"http://{HOST}:{port}"
    users = [f"bench-{n}" for n in range(-(-clients // CLIENTS_PER_USER))]
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {admin}"}) as api:
        for name in users:
            api.post(
                "/api/admin/users", json={"username": name, "password": PASSWORD}
            ).raise_for_status()
    with _pool(4) as pool:
        tokens = list(pool.map(lambda name: webapp(env, "token", "create", name), users))

    async def conversations() -> list[Client]:
        gate = asyncio.Semaphore(16)
        async with httpx.AsyncClient(base_url=base, timeout=30) as api:

            async def create(index: int) -> Client:
                token = tokens[index // CLIENTS_PER_USER]
                headers = {"Authorization": f"Bearer {token}"}
                async with gate:
                    made = []
                    for configuration in ("answer", "brief"):
                        response = await api.post(
                            "/api/conversations",
                            json={"configuration": configuration},
                            headers=headers,
                        )
                        response.raise_for_status()
                        made.append(response.json()["id"])
                return Client(token, made[0], made[1])

            return list(await asyncio.gather(*(create(n) for n in range(clients))))

    return asyncio.run(conversations())


@contextmanager
def _pool(size: int) -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(size) as pool:
        yield pool


def app_request(port: int, client: Client, *, brief: bool = False) -> bytes:
    conversation = client.brief if brief else client.conversation
    return post_request(
        HOST,
        port,
        f"/api/conversations/{conversation}/messages",
        {"content": QUESTION},
        {"Authorization": f"Bearer {client.token}"},
    )


def direct_request(port: int, *, brief: bool = False) -> bytes:
    body: dict[str, object] = {
        "model": UPSTREAM_MODEL,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if brief:
        body["max_tokens"] = 3
    return post_request(HOST, port, "/v1/chat/completions", body, {})


def percentile(samples: list[float], share: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass
class Side:
    streams: list[Stream]
    cpu: float | None = None

    @property
    def failures(self) -> list[Stream]:
        return [s for s in self.streams if not s.ok]

    def ttfts(self) -> list[float]:
        return [s.ttft * 1000 for s in self.streams if s.ok and s.ttft is not None]

    def gaps(self) -> list[float]:
        return [g * 1000 for s in self.streams if s.ok for g in s.gaps]


async def burst(port: int, requests: list[bytes], kind: object) -> list[Stream]:
    return list(await asyncio.gather(*(stream(HOST, port, r, kind) for r in requests)))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Target:
    """A server the clients stream from: its port, the pid whose CPU is read, and how a
    send to it is written."""

    port: int
    pid: int
    request: Callable[[Client, bool], bytes]


def app_target(port: int, pid: int) -> Target:
    return Target(port, pid, lambda client, brief: app_request(port, client, brief=brief))


def floor_target(port: int, pid: int) -> Target:
    def request(_client: Client, brief: bool) -> bytes:
        body: dict[str, object] = {"content": QUESTION, **({"max_tokens": 3} if brief else {})}
        return post_request(HOST, port, "/relay", body, {})

    return Target(port, pid, request)


@dataclass
class Round:
    direct: Side
    app: Side
    floor: Side | None = None


async def through(target: Target, clients: list[Client], n: int) -> Side:
    before = cpu_seconds(target.pid)
    requests = [target.request(c, False) for c in clients[:n]]
    streams = await burst(target.port, requests, app_event)
    return Side(streams, cpu=cpu_seconds(target.pid) - before)


async def load(
    app: Target, up_port: int, clients: list[Client], n: int, rounds: int, floor: Target | None
) -> list[Round]:
    """`rounds` rounds of N concurrent sends: direct, then the floor, then the app."""
    results = []
    for _ in range(rounds):
        direct = Side(await burst(up_port, [direct_request(up_port)] * n, upstream_event))
        await asyncio.sleep(0.3)
        floor_side = None
        if floor is not None:
            floor_side = await through(floor, clients, n)
            await asyncio.sleep(0.3)
        results.append(Round(direct, await through(app, clients, n), floor_side))
        await asyncio.sleep(0.3)
    return results


async def single(
    app: Target, up_port: int, clients: list[Client], pairs: int, floor: Target | None
) -> dict[str, list[float]]:
    """One send at a time, each paired with a direct request (short answers): TTFT in ms
    by side ("direct", "app", and "floor" when there is one)."""
    sides = {"app": app, **({"floor": floor} if floor is not None else {})}
    ttfts: dict[str, list[float]] = {"direct": [], **{name: [] for name in sides}}
    for index in range(pairs + 3):
        client = clients[index % len(clients)]
        got = {
            "direct": await stream(
                HOST, up_port, direct_request(up_port, brief=True), upstream_event
            )
        }
        for name, target in sides.items():
            got[name] = await stream(HOST, target.port, target.request(client, True), app_event)
        if index >= 3 and all(g.ok and g.ttft is not None for g in got.values()):
            for name, g in got.items():
                ttfts[name].append((g.ttft or 0.0) * 1000)
    return ttfts


def _floor(r: Round) -> Side:
    assert r.floor is not None
    return r.floor


def report_load(n: int, rounds: list[Round]) -> dict[str, float]:
    """Each figure per round, then the median over the rounds: one disturbed round (the
    machine is shared) moves the result less than in pooled percentiles. Ratios to the
    floor are taken within each round, so both sides saw the same machine."""

    def median(figure: Callable[[Round], float]) -> float:
        return statistics.median(figure(r) for r in rounds)

    def p(side: Side, share: float) -> float:
        return percentile(side.ttfts(), share)

    def cpu_per_answer(side: Side) -> float:
        return (side.cpu or 0.0) * 1000 / max(1, len(side.streams) - len(side.failures))

    def line(name: str, pick: Callable[[Round], Side], extra: str = "") -> None:
        failures = sum(len(pick(r).failures) for r in rounds)
        gap99 = median(lambda r: percentile(pick(r).gaps(), 0.99))
        cpu = (
            f"   CPU {median(lambda r: cpu_per_answer(pick(r))):.1f} ms/answer"
            if pick(rounds[0]).cpu is not None
            else ""
        )
        print(
            f"  N={n:<4} {name:<7} TTFT p50 {median(lambda r: p(pick(r), 0.5)):7.0f} / p99 "
            f"{median(lambda r: p(pick(r), 0.99)):7.0f} ms   gap p99 {gap99:5.0f} ms   "
            f"failures {failures}{cpu}{extra}"
        )
        for failed in [s for r in rounds for s in pick(r).failures][:3]:
            print(f"      failure: {failed.error}")

    with_floor = all(r.floor is not None for r in rounds)
    line("direct", lambda r: r.direct)
    if with_floor:
        floor_ratio = median(lambda r: p(_floor(r), 0.99) / p(r.direct, 0.99))
        line("floor", _floor, f"   (p99 floor/direct {floor_ratio:.2f}x)")
    figures = {
        "ratio": median(lambda r: p(r.app, 0.99) / p(r.direct, 0.99)),
        "gap99": median(lambda r: percentile(r.app.gaps(), 0.99)),
        "failures": float(sum(len(r.app.failures) for r in rounds)),
    }
    over_floor = ""
    if with_floor:
        figures["ttft_over_floor"] = median(lambda r: p(r.app, 0.99) / p(_floor(r), 0.99))
        figures["p50_over_floor"] = median(lambda r: p(r.app, 0.5) / p(_floor(r), 0.5))
        figures["cpu_over_floor"] = median(
            lambda r: cpu_per_answer(r.app) / max(1e-9, cpu_per_answer(_floor(r)))
        )
        over_floor = (
            f"; app/floor: TTFT p50 {figures['p50_over_floor']:.2f}x, "
            f"p99 {figures['ttft_over_floor']:.2f}x, "
            f"CPU {figures['cpu_over_floor']:.2f}x"
        )
    line(
        "app",
        lambda r: r.app,
        f"   (p99 app/direct {figures['ratio']:.2f}x{over_floor}; medians of {len(rounds)} rounds)",
    )
    return figures


def cross_worker(env: dict[str, str], folder: Path, url: str, clients: list[Client]) -> None:
    token = clients[0].token
    env = {**env, **watchers.UNCAPPED}
    with (
        server(env, folder, 1, set()) as (writer, _),
        server(env, folder, 1, set()) as (watcher, watcher_pid),
    ):
        own = [c.conversation for c in clients if c.token == token][:5]
        delays = uvloop.run(watchers.follow_delay(url, writer, watcher, token, own))
        quiet = new_conversation(writer, token, "quiet")  # its answers wait seconds a chunk
        idle = uvloop.run(watchers.idle_watchers(writer, watcher, watcher_pid, token, quiet))
    watchers.report(delays, idle)


def profile(pid: int, path: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the server while the loads run (collapsed stacks, for reading)."""
    spy = shutil.which("py-spy") or str(WEBAPP.parent / "py-spy")
    process = subprocess.Popen(
        [
            spy,
            "record",
            "-p",
            str(pid),
            "-r",
            os.environ.get("BENCH_PROFILE_RATE", "200"),
            "-f",
            "raw",
            "-o",
            str(path),
            "--nonblocking",
            "--subprocesses",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)
    return process


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def measure(
    env: dict[str, str],
    folder: Path,
    up_port: int,
    *,
    loads: list[int],
    rounds: int,
    workers: int,
    app_cores: set[int],
    pairs: int,
    with_floor: bool = False,
    profile_to: Path | None = None,
) -> list[Client]:
    webapp(env, "migrate")
    with (
        server(env, folder, workers, app_cores) as (port, pid),
        relay_floor(folder, up_port, app_cores, with_floor) as floor,
    ):
        app = app_target(port, pid)
        # No loads and no pairs: the run is admission alone, which needs its 200 clients.
        clients = set_up_accounts(env, port, max(loads, default=10 if pairs else ADMISSION_SENDS))
        # Warm up: code paths, connections to the upstream, the database's caches.
        uvloop.run(load(app, up_port, clients, min(20, len(clients)), 1, floor))
        results = {}
        profiler = profile(pid, profile_to) if profile_to and loads else None
        for n in loads:
            times = min(rounds, 2) if n >= 500 else rounds  # the longest rounds: two do
            results[n] = report_load(n, uvloop.run(load(app, up_port, clients, n, times, floor)))
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=30)
        if pairs:
            profiler = profile(pid, profile_to) if profile_to and not loads else None
            ttfts = uvloop.run(single(app, up_port, clients, pairs, floor))
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(timeout=30)
            report_single(ttfts)
        if workers == 1 and len(clients) >= ADMISSION_SENDS:
            # Last: the admitted answers go on waiting until the server stops.
            profiler = profile(pid, profile_to) if profile_to and not loads and not pairs else None
            report_admission(
                [uvloop.run(admission(port, pid, clients, ADMISSION_SENDS)) for _ in range(2)]
            )
            if profiler is not None:
                profiler.send_signal(signal.SIGINT)
                profiler.wait(timeout=30)
        if workers == 1 and 200 in results and "ttft_over_floor" in results[200]:
            r = results[200]
            print(
                f"  targets N=200 (issue 23): failures 0 {verdict(r['failures'] == 0)}, "
                f"TTFT p99 <= 2x the floor's {verdict(r['ttft_over_floor'] <= 2)}, "
                f"CPU per answer <= 2x the floor's {verdict(r['cpu_over_floor'] <= 2)}"
            )
        if workers == 1 and 500 in results:
            print(f"  targets N=500: failures 0 {verdict(results[500]['failures'] == 0)}")
        if workers == 1:
            now, peak = memory_mb(pid)
            print(f"  server memory: {now:.0f} MB resident at the end, {peak:.0f} MB at most")
    return clients


ADMISSION_SENDS = 200


async def admission(port: int, pid: int, clients: list[Client], n: int) -> tuple[float, float, int]:
    """N sends at once into conversations whose answers wait 15 s for their first word:
    how long until the last is admitted (its `fit` event), and the server's CPU per
    send. That is what the app spends on a send before any answer streams, and the
    earliest the last of a burst can see its first token, however answers stream."""
    gate = asyncio.Semaphore(16)
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}", timeout=30) as api:

        async def quiet(client: Client) -> bytes:
            async with gate:
                made = await api.post(
                    "/api/conversations",
                    json={"configuration": "quiet"},
                    headers={"Authorization": f"Bearer {client.token}"},
                )
            made.raise_for_status()
            path = f"/api/conversations/{made.json()['id']}/messages"
            headers = {"Authorization": f"Bearer {client.token}"}
            return post_request(HOST, port, path, {"content": QUESTION}, headers)

        requests = await asyncio.gather(*(quiet(c) for c in clients[:n]))
    await asyncio.sleep(0.3)
    started, before = time.perf_counter(), cpu_seconds(pid)
    streams = await burst(port, requests, admitted_event)
    cpu = (cpu_seconds(pid) - before) / n
    return (time.perf_counter() - started) * 1000, cpu * 1000, sum(not s.ok for s in streams)


def report_admission(bursts: list[tuple[float, float, int]]) -> None:
    wall = statistics.median(b[0] for b in bursts)
    cpu = statistics.median(b[1] for b in bursts)
    print(
        f"  admission: {ADMISSION_SENDS} sends whose answers wait: the last admitted after "
        f"{wall:.0f} ms, {cpu:.2f} ms of CPU a send, failures {sum(b[2] for b in bursts)} "
        f"(medians of {len(bursts)} bursts)"
    )


def report_single(ttfts: dict[str, list[float]]) -> None:
    direct = ttfts["direct"]

    def added(name: str) -> float:
        return statistics.median(a - d for a, d in zip(ttfts[name], direct, strict=True))

    floor, target = "", ""
    if "floor" in ttfts:
        floor = f", floor {statistics.median(ttfts['floor']):.1f} ms (adds {added('floor'):.2f})"
        limit = added("floor") + 2
        target = f"; target <= the floor's + 2 ms = {limit:.2f}: {verdict(added('app') <= limit)}"
    print(
        f"  single send: direct TTFT median {statistics.median(direct):.1f} ms{floor}, "
        f"app {statistics.median(ttfts['app']):.1f} ms; app adds {added('app'):.2f} ms "
        f"(medians of {len(direct)} paired differences{target})"
    )


@contextmanager
def relay_floor(
    folder: Path, up_port: int, core_set: set[int], wanted: bool
) -> Iterator[Target | None]:
    """`bench.relay` on the app's core, or nothing when not `wanted`."""
    if not wanted:
        yield None
        return
    port = free_port()
    log = folder / f"relay-{port}.log"
    env = {**os.environ, "BENCH_RELAY_UPSTREAM": f"http://{HOST}:{up_port}/v1"}
    env.update(BENCH_RELAY_MODEL=UPSTREAM_MODEL, BENCH_RELAY_SYSTEM=SYSTEM)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.relay", "--port", str(port)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    pin(process.pid, core_set)
    try:
        wait_until_up(f"http://{HOST}:{port}/relay", process, log)
        yield floor_target(port, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=20)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument("--loads", default="50,200,500", help="concurrent sends, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds per load")
    parser.add_argument("--pairs", type=int, default=30, help="paired single sends")
    parser.add_argument("--no-postgres", action="store_true", help="skip the --workers 2 run")
    parser.add_argument("--no-floor", action="store_true", help="skip the bench.relay floor")
    parser.add_argument(
        "--single-only",
        action="store_true",
        help="only the paired single sends (no loads, pages or PostgreSQL): the quick check",
    )
    parser.add_argument("--postgres-loads", default="200")
    parser.add_argument(
        "--profile", type=Path, help="py-spy (pip install py-spy) the SQLite server into this file"
    )
    args = parser.parse_args(argv)
    loads = [] if args.single_only else [int(n) for n in args.loads.split(",") if n]
    available = cores()
    # The app gets a core of its own where there are two; the upstream and the clients
    # share the rest. (The targets are stated for one core.)
    app_cores = {available[0]} if len(available) > 1 else set()
    other_cores = set(available[1:]) if len(available) > 1 else set()
    pin(os.getpid(), other_cores)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    print(
        f"answers: {len(REPLY.split())} chunks, {CHUNK_DELAY * 1000:.0f} ms apart; "
        f"app on cores {sorted(app_cores) or 'any'}, upstream and clients on "
        f"{sorted(other_cores) or 'any'}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with (
            upstream(folder, other_cores, CHUNK_DELAY, REPLY) as up_port,
            upstream(folder, other_cores, QUIET_CHUNK_DELAY, REPLY) as quiet_port,
        ):
            base_env = {
                **os.environ,
                "WEBAPP_CONFIG": str(catalog(folder / "catalog.toml", up_port, quiet_port)),
                "WEBAPP_SECRET_KEY": secrets.token_hex(16),
                "WEBAPP_RATE_LIMIT_MESSAGES": str(RATE_LIMIT),
            }
            print("SQLite, one worker:")
            env = {**base_env, "WEBAPP_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'bench.db'}"}
            measure(
                env,
                folder,
                up_port,
                loads=loads,
                rounds=args.rounds,
                workers=1,
                app_cores=app_cores,
                pairs=args.pairs,
                with_floor=not args.no_floor,
                profile_to=args.profile,
            )
            if args.single_only:
                return
            print(f"SQLite, one worker, pages following a long answer ({args.rounds} rounds):")
            page_watchers.measure(folder, args.rounds, app_cores, other_cores)
            if not args.no_postgres:
                print("PostgreSQL, --workers 2:")
                pg_loads = [int(n) for n in args.postgres_loads.split(",") if n]
                with throwaway_database("webapp_bench") as url:
                    env = {**base_env, "WEBAPP_DATABASE_URL": url}
                    clients = measure(
                        env,
                        folder,
                        up_port,
                        loads=pg_loads,
                        rounds=2,
                        workers=2,
                        app_cores=set(available),
                        pairs=0,
                    )
                    print("PostgreSQL, two servers (one writes, the other follows):")
                    cross_worker(env, folder, url, clients)


if __name__ == "__main__":
    main()
