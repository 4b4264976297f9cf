"""Benchmark: each hot statement the app runs through `Prepared` against the same statement
through Core, and the sign-in's lookup on the loop against a read unit (issue 38).

The project's rule is one way to run a statement, Core on a unit's connection
(`Database.read` / `write`): a shortcut stays only if it buys more than 10% of a send's
CPU or first-token time. Whole sends are too noisy on a shared machine to show
differences that small (docs/benchmarks.md: runs of one tree moved 2-3x), so this times
the statements alone: in one process, on the same rows, the two ways alternating run by
run, each statement where the app runs it (a send's in a send's unit, the others in a
read unit), on SQLite and, if it answers, on a throwaway PostgreSQL database.

    make bench-statements                              # SQLite, then PostgreSQL
    python -m bench.statements --rounds 10 --no-postgres
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, cast

from sqlalchemy import Connection, insert, update
from sqlalchemy.sql.cache_key import HasCacheKey
from sqlmodel import Session, col

from bench.common import fresh_sqlite, git_revision, machine, pin_to_one_core, run, with_forks
from bench.fit_and_load import sentence
from tests.factories import TEST_HASHER
from tests.postgres import POSTGRES_SERVER_URL, reachable, throwaway_database
from webapp.accounts.models import User
from webapp.accounts.preferences import _INSTRUCTIONS
from webapp.accounts.service import _SESSION_OWNER, _TOKEN_OWNER, AccountService, digest
from webapp.chat.sending.admission import _TOUCH_CONVERSATION
from webapp.chat.sending.store import _INSERT_TURN, _turn_values
from webapp.chat.stored import branches, history
from webapp.chat.stored.budget import _RECORD_USE, Use
from webapp.chat.stored.history import FIRST_BATCH
from webapp.chat.stored.models import (
    MESSAGE_DEFAULTS,
    Conversation,
    GatewayCall,
    Message,
    Role,
    Status,
)
from webapp.db import Database
from webapp.llm.estimator import estimate_message
from webapp.migrate import upgrade
from webapp.prepared import Prepared, Row
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import utcnow

SEND_CPU_US = 4000.0
"""A send's app CPU, the denominator of the shares: docs/benchmarks.md, bench-load's
latest run (6 December 2026, `ce14a6f`): the app adds 3.98-4.06 ms to a single send's
first token; a send under a burst of 200 costs the server 2.03-2.68 ms of CPU."""
SHORTCUT_WORTH = 0.10
"""The project's bar: a shortcut stays if it buys more than this share of a send."""
TURNS = 300
FORKS = 2
"""Fork points along the active branch: it is three runs, as after two regenerates."""
PIN_EVERY = 40
OTHER_OWNERS = 4
SENDS_IN_WINDOW = 20
"""The signed-in user's sends in the rate limit's window (under the default limit, 30)."""
Way = Literal["Prepared", "Core"]
WAYS: tuple[Way, Way] = ("Prepared", "Core")
Fetch = Literal["all", "first", "none"]
Unit = Literal["send", "read"]


@dataclass(frozen=True)
class Fixture:
    """What the statements are run with: ids and values from the populated database."""

    user_id: int
    owner: str
    token: str
    session_secret: str
    conversation_id: str
    runs: tuple[tuple[int, int], ...]
    """The active branch's runs, newest first (`history.Branch.runs`)."""
    next_seq: int
    newest_user_seq: int
    oldest_tail_seq: int


@dataclass(frozen=True)
class Case:
    name: str
    statement: Prepared
    values: Callable[[int], dict[str, Any]]
    """The values of the statement's i-th run in a unit (a write needs fresh keys)."""
    fetch: Fetch
    """How the app takes the rows (`.rows` / `.first`; "none": a write without RETURNING)."""
    in_send: Literal["1x", "alt", ""]
    """"1x": run once by a send into a conversation longer than its tail; "alt": another
    way Core would run one of those."""
    unit: Unit
    """Where the app runs it: a send's unit (`write_core`) or a read unit."""
    core: Callable[[Connection, dict[str, Any]], object] | None = None
    """Core's way when it is not `connection.execute` of the same statement."""

    @property
    def cached(self) -> bool:
        """Whether Core can cache the statement's compiled form (a multi-row VALUES with
        bound parameters has no cache key: Core compiles it on every run)."""
        statement = self.statement.statement
        keyed = isinstance(statement, HasCacheKey) and statement._generate_cache_key() is not None
        return self.core is not None or keyed


@dataclass
class Timings:
    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)

    def add(self, way: str, wall: float, cpu: float) -> None:
        self.wall.setdefault(way, []).append(wall)
        self.cpu.setdefault(way, []).append(cpu)

    def median(self, way: str, clock: Literal["wall", "cpu"] = "wall") -> float:
        return statistics.median((self.wall if clock == "wall" else self.cpu)[way])

    def paired(self, slow: str, fast: str, clock: Literal["wall", "cpu"]) -> float:
        """The median of run-by-run differences: neighbours in time share the machine's
        speed of the moment, which on a shared machine drifts by tens of percent."""
        samples = self.wall if clock == "wall" else self.cpu
        return statistics.median(s - f for s, f in zip(samples[slow], samples[fast], strict=True))


class _Discard(Exception):
    """Ends a unit that measured, carrying what it found: the unit is rolled back, so
    every round meets the same rows."""

    def __init__(self, found: object) -> None:
        super().__init__("rolled back")
        self.found = found


# ---- the database --------------------------------------------------------------------------


def _turns(
    rng: random.Random, conversation_id: str, now: datetime
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """TURNS turns as a send leaves them: the user row with its fit's facts, the answer
    with the provider's figures and its rendering."""
    turns = []
    for turn in range(TURNS):
        question, answer = sentence(rng, rng.randint(60, 240)), sentence(rng, rng.randint(200, 900))
        at = now - timedelta(minutes=2 * (TURNS - turn))
        common = {**MESSAGE_DEFAULTS, "conversation_id": conversation_id, "created_at": at}
        common["updated_at"] = at
        user = {
            **common,
            "role": Role.USER.value,
            "content": question,
            "estimated_tokens": estimate_message({"role": "user", "content": question}),
            "prior_turns": turn,
            "turn_number": turn + 1,
            "pinned": turn % PIN_EVERY == 5,
            "dropped_turns": max(0, turn - 30),
            "fit_model": "small",
            "fit_window": 4096,
            "fit_reserve": 512,
            "fit_budget": 3584,
            "fit_estimated_tokens": 3400,
            "fit_overflow_at_floor": False,
            "fit_counted_by": "estimate",
            "fit_left_out": [[3, 2 * (turn - 30)]] if turn > 31 else [],
            "fit_pins_dropped": 0,
            "fit_trim_to": 0.75,
            "fit_cut_moved": turn % 8 == 0,
        }
        reply = {
            **common,
            "role": Role.ASSISTANT.value,
            "content": answer,
            "content_html": f"<p>{answer}</p>",
            "estimated_tokens": estimate_message({"role": "assistant", "content": answer}),
            "pinned": False,
            "model": "small",
            "prompt_tokens": 3400,
            "completion_tokens": 120,
            "finish_reason": "stop",
        }
        turns.append((user, reply))
    return turns


async def populate(url: str) -> Fixture:
    """A signed-in user (a browser session and an API token) with custom instructions, a
    conversation of TURNS turns with FORKS forks and pins, and rate-limit rows of the user
    and of OTHER_OWNERS other owners, made the app's ways where it has one."""
    db = Database(url)
    accounts = AccountService(db, hasher=TEST_HASHER)
    user = await accounts.create_user("bench", "a bench password, long enough")
    user_id = id_of(user)
    owner = f"user:{user_id}"
    session_secret = await accounts.start_session(user_id)
    _, token = await accounts.create_token(user_id, "bench")
    now = utcnow()
    rng = random.Random(38)
    conversation = Conversation(owner=owner, user_id=user_id, configuration="small")
    rows = with_forks(_turns(rng, conversation.id, now), FORKS)
    others = [
        User(username=f"other{n}", username_key=f"other{n}", password_hash="x")
        for n in range(OTHER_OWNERS)
    ]

    def fill(session: Session) -> None:
        session.add_all(others)
        session.flush()
        connection = session.connection()
        connection.execute(
            update(User)
            .where(col(User.id) == user_id)
            .values(custom_instructions="Answer briefly; British spelling; code in Python 3.11.")
        )
        connection.execute(insert(Conversation).values(conversation.model_dump()))
        connection.execute(insert(Message), rows)
        uses = []
        for n, who in enumerate([owner, *(f"user:{id_of(o)}" for o in others)]):
            sends = SENDS_IN_WINDOW if who == owner else 10 + 5 * n
            in_window = [50 * (k + 1) / sends for k in range(sends)]
            left = [61.0 + 3 * k for k in range(30)]  # out of the window, not yet pruned
            for k, ago in enumerate(in_window + left):
                kind = Use.CALL if k % 5 == 4 else Use.SEND
                at = now - timedelta(seconds=ago)
                uses.append({"owner": who, "called_at": at, "kind": kind.value, "size": 0})
        connection.execute(insert(GatewayCall), uses)

    await db.write(fill)

    def tail(session: Session) -> history.Tail:
        return history.read_tail(session.connection(), conversation.id)

    read = await db.read(tail)
    await db.dispose()
    assert len(read.branch.runs) == FORKS + 1 and not read.complete
    user_row = next(row for row in read.rows if row[history.ROLE] == Role.USER.value)
    return Fixture(
        user_id=user_id,
        owner=owner,
        token=token,
        session_secret=session_secret,
        conversation_id=conversation.id,
        runs=read.branch.runs,
        next_seq=read.next_seq,
        newest_user_seq=user_row[history.SEQ],
        oldest_tail_seq=read.rows[-1][history.SEQ],
    )


# ---- the statements ------------------------------------------------------------------------


def cases(fixture: Fixture, settings: Settings) -> list[Case]:
    """Every statement the app runs through `Prepared`, with the values it runs them with
    on this data (a send into the long conversation with a 4k model: its walk stays in
    the tail, the head is read, pins between them)."""
    conversation_id, runs = fixture.conversation_id, fixture.runs
    now = utcnow()
    walk = history._statements(())  # no exact tokenizer: the estimate's route
    newest, oldest = runs[0], runs[-1]
    in_conversation = {"conversation_id": conversation_id}

    def rows(i: int) -> list[dict[str, Any]]:
        """A turn's two rows as `insert_turn` builds them, at fresh seqs."""
        seq = fixture.next_seq + 2 * i
        common = {"conversation_id": conversation_id, "created_at": now, "updated_at": now}
        question = "And what do you make of all that, given the last three answers?"
        fit = {
            "dropped_turns": TURNS - 30,
            "fit_model": "small",
            "fit_window": 4096,
            "fit_reserve": 512,
            "fit_budget": 3584,
            "fit_estimated_tokens": 3390,
            "fit_overflow_at_floor": False,
            "fit_counted_by": "estimate",
            "fit_left_out": [[3, fixture.oldest_tail_seq - 1]],
            "fit_pins_dropped": 0,
            "fit_trim_to": 0.75,
            "fit_cut_moved": False,
            "fit_instructions_tokens": 14,
        }
        return [
            {
                **MESSAGE_DEFAULTS,
                **common,
                "seq": seq,
                "parent_seq": None,
                "role": Role.USER,
                "content": question,
                "estimated_tokens": 17,
                "prior_turns": TURNS,
                "turn_number": TURNS + 1,
                "token_counts": None,
                **fit,
            },
            {
                **MESSAGE_DEFAULTS,
                **common,
                "seq": seq + 1,
                "role": Role.ASSISTANT,
                "status": Status.STREAMING,
            },
        ]

    def turn(i: int) -> dict[str, Any]:
        return _turn_values(rows(i))

    def turn_and_rows(i: int) -> dict[str, Any]:
        """`turn`'s values, which `Prepared` takes, and the rows, which Core takes."""
        return {**turn(i), _ROWS: rows(i)}

    def fixed(values: dict[str, Any]) -> Callable[[int], dict[str, Any]]:
        return lambda _: values

    window = settings.rate_limit_window
    touch = {
        **in_conversation,
        "owned_by": fixture.owner,
        "now": now,
        "since": now - timedelta(seconds=window),
        "limit": settings.rate_limit_messages,
    }
    use = {"owner": fixture.owner, "at": now, "kind": Use.SEND.value, "size": 0}
    tail = {**in_conversation, "first": newest[0], "last": newest[1], "limit": FIRST_BATCH}
    head = {**in_conversation, "first": oldest[0], "last": oldest[1], "limit": 8}
    pins = {**in_conversation, "after": 2, "before": fixture.oldest_tail_seq}
    fit = {**in_conversation, "seq": fixture.newest_user_seq}
    page = {**in_conversation, "first": newest[0], "last": newest[1], "limit": 100}
    run = {**in_conversation, "first": oldest[0], "last": oldest[1], "limit": 2**62}
    branch = {**in_conversation, "leaf": None}
    owner = {"user_id": fixture.user_id}
    token = {"secret": digest(fixture.token)}
    login = {"secret": digest(fixture.session_secret)}
    send: Unit = "send"
    read: Unit = "read"
    return [
        Case("admission: touch", _TOUCH_CONVERSATION, fixed(touch), "first", "1x", send),
        Case("budget: record use", _RECORD_USE, fixed(use), "none", "1x", send),
        Case("history: branch runs", history._RUNS, fixed(branch), "all", "1x", send),
        Case(f"history: tail ({FIRST_BATCH} rows)", walk.newest_in, fixed(tail), "all", "1x", send),
        Case("history: head (8 rows)", walk.oldest_in, fixed(head), "all", "1x", send),
        Case("history: pins between", walk.pinned_between, fixed(pins), "all", "1x", send),
        Case("history: previous fit", history._PREVIOUS_FIT, fixed(fit), "first", "1x", send),
        Case("preferences: instructions", _INSTRUCTIONS, fixed(owner), "first", "1x", send),
        Case("store: insert turn", _INSERT_TURN, turn, "all", "1x", send),
        Case(
            "store: insert turn, Core: 2 inserts",
            _INSERT_TURN,
            turn_and_rows,
            "all",
            "alt",
            send,
            _insert_rows,
        ),
        Case("history: newest row", history._NEWEST_ROW, fixed(in_conversation), "first", "", send),
        Case("branches: page (100 rows)", branches._NEWEST_IN, fixed(page), "all", "", read),
        Case(
            f"branches: whole run ({oldest[1] - oldest[0] + 1} rows)",
            branches._OLDEST_IN,
            fixed(run),
            "all",
            "",
            read,
        ),
        Case("sign-in: token owner", _TOKEN_OWNER, fixed(token), "all", "", read),
        Case("sign-in: session owner", _SESSION_OWNER, fixed(login), "all", "", read),
    ]


_ROWS = "rows of the turn"
_INSERT_ROW = insert(Message).returning(col(Message.seq), col(Message.id))
"""One row: a statement Core caches (the turn's two-row VALUES it compiles every time)."""


def _insert_rows(connection: Connection, values: dict[str, Any]) -> list[tuple[Any, ...]]:
    """A turn's rows the way Core would store them: one cached insert a row."""
    return [tuple(connection.execute(_INSERT_ROW, row).one()) for row in values[_ROWS]]


def unmeasured(measured: Iterable[Prepared]) -> list[str]:
    """`Prepared` statements the app has built that no case measures (one added since,
    or one this file missed): the first words of their SQL."""
    seen = {id(p) for p in measured}
    return [
        " ".join(str(p.statement).split())[:70]
        for p in gc.get_objects()
        if isinstance(p, Prepared) and id(p) not in seen
    ]


# ---- timing --------------------------------------------------------------------------------


def _once(connection: Connection, case: Case, way: Way, values: dict[str, Any]) -> object:
    if way == "Prepared":
        if case.fetch == "first":
            return case.statement.first(connection, values)
        return case.statement.rows(connection, values)
    if case.core is not None:
        return case.core(connection, values)
    result = connection.execute(case.statement.statement, values)
    if case.fetch == "first":
        return result.first()
    if case.fetch == "all":
        return result.all()
    return None


def alternate(connection: Connection, case: Case, pairs: int, start: int) -> Timings:
    """`pairs` runs each way, alternating, the pair's order flipping each pair (whichever
    runs first may find the caches a little colder)."""
    timings = Timings()
    for pair in range(pairs):
        ways: tuple[Way, Way] = ("Prepared", "Core") if (start + pair) % 2 else ("Core", "Prepared")
        for k, way in enumerate(ways):
            values = case.values(2 * pair + k)
            wall, cpu = time.perf_counter(), time.thread_time()
            _once(connection, case, way, values)
            timings.add(way, time.perf_counter() - wall, time.thread_time() - cpu)
    return timings


async def discarded(db: Database, case: Case, work: Callable[[Connection], object]) -> object:
    """What `work` returns, run in a unit of the kind the app runs the case's statement
    in, and rolled back."""

    def unit(connection: Connection) -> None:
        raise _Discard(work(connection))

    try:
        if case.unit == "send":
            await db.write_core(unit, quick=True)  # where a send's transaction runs
        else:
            await db.read(lambda session: unit(session.connection()))
    except _Discard as done:
        return done.found
    raise AssertionError("a unit of `discarded` always raises")


async def in_unit(db: Database, case: Case, pairs: int, start: int) -> Timings:
    found = await discarded(db, case, lambda c: alternate(c, case, pairs, start))
    assert isinstance(found, Timings)
    return found


def _plain(case: Case, found: object) -> list[tuple[Any, ...]]:
    if found is None:
        return []
    if case.fetch == "first":
        return [tuple(cast(Sequence[Any], found))]
    return [tuple(row) for row in cast(Sequence[Sequence[Any]], found)]


async def same_rows(db: Database, case: Case) -> None:
    """The premise: both ways return the same rows for the same values (fresh ids and a
    write's own bookkeeping aside)."""

    def both(connection: Connection) -> tuple[list[tuple[Any, ...]], ...]:
        return tuple(
            _plain(case, _once(connection, case, way, case.values(k))) for k, way in enumerate(WAYS)
        )

    prepared, core = cast(tuple[list[tuple[Any, ...]], ...], await discarded(db, case, both))
    if case.fetch == "none":
        return  # on PostgreSQL the insert returns its id, which Core keeps to itself
    if case.statement is _INSERT_TURN:
        assert len(prepared) == len(core) == 2, (prepared, core)
    else:
        assert prepared == core, f"{case.name}: {prepared!r} != {core!r}"


async def statements(db: Database, todo: list[Case], rounds: int, pairs: int) -> list[Timings]:
    """Round by round through every case, so each statement's rounds are spread over the
    whole run rather than bunched in one stretch of the machine's speed."""
    for case in todo:
        await same_rows(db, case)
        await in_unit(db, case, pairs, 0)  # warm-up: compiled forms, caches, pages
    results = [Timings() for _ in todo]
    for round_ in range(rounds):
        for case, timings in zip(todo, results, strict=True):
            got = await in_unit(db, case, pairs, round_)
            for way in ("Prepared", "Core"):
                for wall, cpu in zip(got.wall[way], got.cpu[way], strict=True):
                    timings.add(way, wall, cpu)
    return results


LOOKUP_WAYS = ("Database.lookup", "read unit, Prepared", "read unit, Core")


def _prepared_unit(session: Session, statement: Prepared, values: dict[str, Any]) -> list[Row]:
    return statement.rows(session.connection(), values)


def _core_unit(session: Session, statement: Prepared, values: dict[str, Any]) -> list[Row]:
    return [tuple(row) for row in session.connection().execute(statement.statement, values)]


async def lookups(
    db: Database, statement: Prepared, values: dict[str, Any], rounds: int
) -> Timings:
    """A sign-in's read as a request awaits it: wall time and the process's CPU (the
    loop's and a reader thread's), the three ways in turn, rotating who goes first."""
    ways: dict[str, Callable[[], Awaitable[list[Row]]]] = {
        "Database.lookup": lambda: db.lookup(statement, values),
        "read unit, Prepared": lambda: db.read(_prepared_unit, statement, values),
        "read unit, Core": lambda: db.read(_core_unit, statement, values),
    }
    found = [await way() for way in ways.values()]
    assert found[0] == found[1] == found[2] and len(found[0]) == 1, found
    timings = Timings()
    names = list(ways)
    for round_ in range(-20, rounds):  # the first 20: warm-up
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            wall, cpu = time.perf_counter(), time.process_time()
            await ways[name]()
            if round_ >= 0:
                timings.add(name, time.perf_counter() - wall, time.process_time() - cpu)
    return timings


# ---- the report ----------------------------------------------------------------------------


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def _share(seconds: float) -> str:
    return f"{seconds * 1e6 / SEND_CPU_US:.1%}"


def _worth(seconds: float) -> str:
    return "yes" if seconds * 1e6 > SHORTCUT_WORTH * SEND_CPU_US else "no"


def report_statements(todo: Sequence[Case], results: Sequence[Timings], runs: int) -> None:
    print(
        f"  each way {runs:,} runs a statement; medians in µs; Δ = Core − Prepared, the median"
        f" of pair-by-pair differences; share: Δ CPU of a {SEND_CPU_US / 1000:g} ms send;"
        " * Core compiles it every run (no cache key)"
    )
    header = f"  {'statement':<38} {'send':>4} {'Prepared':>9} {'Core':>9}"
    print(header + f" {'Δ wall':>9} {'Δ CPU':>9} {'share':>6}  > 10%?")
    deltas = []
    for case, timings in zip(todo, results, strict=True):
        wall = timings.paired("Core", "Prepared", "wall")
        cpu = timings.paired("Core", "Prepared", "cpu")
        deltas.append((case, wall, cpu))
        name = case.name + ("" if case.cached else " *")
        print(
            f"  {name:<38} {case.in_send:>4}"
            f" {_us(timings.median('Prepared')):>9} {_us(timings.median('Core')):>9}"
            f" {_us(wall):>9} {_us(cpu):>9} {_share(cpu):>6}  {_worth(cpu)}"
        )
    replaced = {case.statement for case in todo if case.in_send == "alt"}
    for title, kinds, skip in (
        ("a send: the 1x, summed", {"1x"}, set()),
        ("a send: the 1x and alt, summed", {"1x", "alt"}, replaced),
    ):
        chosen = [
            (wall, cpu)
            for case, wall, cpu in deltas
            if case.in_send in kinds and not (case.in_send == "1x" and case.statement in skip)
        ]
        wall, cpu = sum(w for w, _ in chosen), sum(c for _, c in chosen)
        print(
            f"  {f'{title} ({len(chosen)})':<38} {'':>4} {'':>9} {'':>9}"
            f" {_us(wall):>9} {_us(cpu):>9} {_share(cpu):>6}  {_worth(cpu)}"
        )


def report_lookups(found: dict[str, Timings], rounds: int) -> None:
    print(
        f"  sign-in, as a request awaits it ({rounds:,} rounds; µs, wall / CPU of the process;"
        " Δ: read unit with Core − lookup)"
    )
    print(f"  {'statement':<22}" + "".join(f" {way:>22}" for way in LOOKUP_WAYS) + "  Δ wall / CPU")
    for name, timings in found.items():
        cells = "".join(
            f" {_us(timings.median(w)) + ' / ' + _us(timings.median(w, 'cpu')):>22}"
            for w in LOOKUP_WAYS
        )
        wall = timings.paired("read unit, Core", "Database.lookup", "wall")
        cpu = timings.paired("read unit, Core", "Database.lookup", "cpu")
        print(f"  {name:<22}{cells}  {_us(wall)} / {_us(cpu)} ({_share(cpu)} of a send)")


async def bench(url: str, title: str, rounds: int, pairs: int) -> None:
    started = time.perf_counter()
    fixture = await populate(url)
    db = Database(url)
    todo = cases(fixture, Settings())
    missing = unmeasured(case.statement for case in todo)
    try:
        results = await statements(db, todo, rounds, pairs)
        found = {
            "token owner": await lookups(
                db, _TOKEN_OWNER, {"secret": digest(fixture.token)}, rounds * pairs // 4
            ),
            "session owner": await lookups(
                db, _SESSION_OWNER, {"secret": digest(fixture.session_secret)}, rounds * pairs // 4
            ),
        }
    finally:
        await db.dispose()
    print(
        f"{title}: {TURNS} turns, {FORKS} forks (runs {list(fixture.runs)}),"
        f" {time.perf_counter() - started:.0f} s"
    )
    report_statements(todo, results, rounds * pairs)
    report_lookups(found, rounds * pairs // 4)
    for sql in missing:
        print(f"  NOT MEASURED, a Prepared built by the app: {sql}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30, help="units a statement, alternated")
    parser.add_argument("--pairs", type=int, default=25, help="runs each way in a unit")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.rounds <= 1000 or not 1 <= args.pairs <= 1000:
        parser.error("--rounds and --pairs: 1 to 1000")
    load = ", ".join(f"{n:.2f}" for n in os.getloadavg())
    print(f"machine: {machine()}; {pin_to_one_core()}; load average {load}; {git_revision()}")
    with tempfile.TemporaryDirectory() as folder:
        run(bench(fresh_sqlite(Path(folder) / "bench.db"), "SQLite", args.rounds, args.pairs))
    if args.no_postgres:
        return
    if not reachable():
        print(f"PostgreSQL: not reachable at {POSTGRES_SERVER_URL}, skipped")
        return
    with throwaway_database("bench_statements") as url:
        upgrade(url)
        run(bench(url, "PostgreSQL", args.rounds, args.pairs))


if __name__ == "__main__":
    main()
