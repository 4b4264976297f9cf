"""Benchmark: the fit-and-load step of one send in a conversation of 10,000 turns.

Target (issues 2, 8 and 11): under 20 ms with a 128k-token model and under 5 ms with a
4k-token model, on one core, with twenty pinned turns spread over the history, both
in a linear conversation and in one with 100 forks along its active branch (each
leaving an earlier, pinned alternative on record that must not be sent); the cost
must follow what is kept, not what is stored. For contrast it also times the naive
way (read every row, walk the active branch, fit it whole).

    make bench-fit            # SQLite; add --postgres URL to run on PostgreSQL too
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
from pathlib import Path

from sqlalchemy import insert, text
from sqlmodel import Session, col, select

from bench.common import (
    active_path,
    fresh_sqlite,
    machine,
    pin_to_one_core,
    run,
    summary,
    timed,
    with_forks,
)
from webapp.chat.stored.history import load_transcript, previous_fit, read_tail
from webapp.chat.stored.models import Conversation, Message, Role, Status
from webapp.db import Database, create_engine
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import Catalog, ConfigurationSpec, ModelSpec, ProviderSpec
from webapp.llm.estimator import estimate_message
from webapp.llm.manager import LLMManager
from webapp.llm.routing import Route
from webapp.llm.window import FitResult, Transcript
from webapp.migrate import upgrade

CALLER = "user:1"
"""Whose sends are fitted: a caller with no figure of its own, sized by the shared one."""
TURNS = 10_000
FORKS = 100
PIN_EVERY = 500
"""One turn in 500 is pinned: twenty pins spread over the whole history."""
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "box",
    "jumbled",
    "crates",
    "of",
    "vexing",
    "liquor",
    "and",
    "zany",
    "quartz",
]


def catalog() -> Catalog:
    sizes = {"big": (131_072, 4096), "small": (4096, 512)}
    models = {
        name: ModelSpec(name=name, provider="demo", context_window=window, max_output_tokens=most)
        for name, (window, most) in sizes.items()
    }
    configurations = {name: ConfigurationSpec(name=name, model=name) for name in models}
    return Catalog(
        providers={"demo": ProviderSpec(name="demo", kind="demo")},
        models=models,
        configurations=configurations,
        embeds={},
    )


def sentence(rng: random.Random, size: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS))
    return " ".join(words)


async def populate(url: str, forks: int = 0) -> tuple[str, int]:
    """One conversation of TURNS turns on its active branch, about 5 MB of text, estimates
    stored as a send would, with `forks` fork points: (its id, its newest seq)."""
    engine = create_engine(url)
    rng = random.Random(7)
    conversation = Conversation(owner="bench", configuration="big", title="long")
    turns = []
    for turn in range(TURNS):
        pair = []
        for role, size in ((Role.USER, 150), (Role.ASSISTANT, 350)):
            content = sentence(rng, size)
            pair.append(
                {
                    "conversation_id": conversation.id,
                    "role": role.value,
                    "content": content,
                    "status": Status.COMPLETE.value,
                    "estimated_tokens": estimate_message({"role": role.value, "content": content}),
                    "prior_turns": turn if role == Role.USER else None,
                    "pinned": role == Role.USER and turn % PIN_EVERY == 7,
                }
            )
        turns.append((pair[0], pair[1]))
    rows = with_forks(turns, forks, pin_alternatives=True)
    async with engine.begin() as connection:
        await connection.execute(insert(Conversation).values(conversation.model_dump()))
        for start in range(0, len(rows), 2000):
            await connection.execute(insert(Message), rows[start : start + 2000])
        text_bytes = (
            await connection.execute(
                text("SELECT sum(length(content)) FROM message WHERE conversation_id = :c"),
                {"c": conversation.id},
            )
        ).scalar_one()
    await engine.dispose()
    print(
        f"  stored {len(rows):,} messages, {text_bytes / 1e6:.1f} MB of text, {forks} forks along "
        f"the active branch ({TURNS:,} turns)"
    )
    return conversation.id, len(rows)


async def measure(url: str, conversation_id: str, newest_seq: int) -> dict[str, list[float]]:
    db = Database(url)
    manager = LLMManager(catalog(), Calibrator())
    newest = {"role": "user", "content": "And what do you make of all that?"}
    newest_tokens = estimate_message(newest)
    results: dict[str, list[float]] = {}
    naive_fits = {}

    def load(session: Session, route: Route) -> Transcript:
        """What a send reads, in the transaction a send reads it in."""
        connection = session.connection()
        tail = read_tail(connection, conversation_id, manager.exact_tokenizers(route))
        assert tail.next_seq == newest_seq + 1 and tail.prior_turns == TURNS
        previous = previous_fit(connection, conversation_id, tail)
        return load_transcript(
            connection,
            conversation_id,
            tail,
            newest,
            newest_tokens,
            budget=manager.largest_budget(route),
            sizers=manager.sizers(route, CALLER),
            cut=previous.kept_from if previous is not None else 0,
        )

    for name in ("big", "small"):
        route = manager.route(name)
        model = route.primary

        async def bounded(route: Route = route, model: ModelSpec = model) -> None:
            transcript = await db.write(load, route)
            manager.fit_for(route, model, transcript, caller=CALLER)

        async def naive(route: Route = route, model: ModelSpec = model) -> FitResult:
            query = (
                select(Message)
                .where(Message.conversation_id == conversation_id)
                .order_by(col(Message.seq))
            )
            stored = await db.read(lambda session: session.exec(query).all())
            rows = active_path([r.model_dump() for r in stored])
            messages = [{"role": r["role"], "content": r["content"]} for r in rows] + [newest]
            estimates = [r["estimated_tokens"] for r in rows] + [newest_tokens]
            pinned = tuple(2 * i for i, r in enumerate(rows[::2]) if r["pinned"])
            return manager.fit_for(
                route, model, Transcript(messages, estimates, pinned=pinned), caller=CALLER
            )

        naive_fits[name] = naive
        results[f"fit-and-load, {model.window:,}-token model"] = await timed(bounded, 200)
        results[f"naive load-all, {model.window:,}-token model"] = await timed(naive, 5, warmup=1)

    for name in ("big", "small"):
        route = manager.route(name)
        transcript = await db.write(load, route)
        result = manager.fit_for(route, route.primary, transcript, caller=CALLER)
        everything = await naive_fits[name]()
        assert result.messages == everything.messages, "bounded and naive fits disagree"
        print(
            f"  {route.primary.window:,}-token model: {result.kept_turns:,} turns kept "
            f"({len(transcript.pinned)} pins read, {result.pins_dropped} of them left out), "
            f"{result.dropped_turns:,} left out"
        )
    await db.dispose()
    return results


def report(results: dict[str, list[float]]) -> None:
    for name, samples in results.items():
        print(f"  {name:<42} {summary(samples)}")
    big = statistics.median(results["fit-and-load, 131,072-token model"])
    naive = statistics.median(results["naive load-all, 131,072-token model"])
    small = statistics.median(results["fit-and-load, 4,096-token model"])
    print(
        f"  naive / bounded (128k): {naive / big:.0f}x; targets: 128k < 20 ms "
        f"({'met' if big < 20 else 'MISSED'}), 4k < 5 ms ({'met' if small < 5 else 'MISSED'})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", help="also run on this PostgreSQL URL (its tables are reset)")
    args = parser.parse_args()
    print(f"machine: {machine()}; {pin_to_one_core()}")
    with tempfile.TemporaryDirectory() as folder:
        url = fresh_sqlite(Path(folder) / "bench.db")
        for forks in (0, FORKS):
            print(f"SQLite, {'linear' if not forks else f'{forks} forks'}:")
            report(await measure(url, *await populate(url, forks)))
    if args.postgres:
        engine = create_engine(args.postgres)
        async with engine.begin() as connection:
            for table in ("message", "conversation", "model_calibration", "alembic_version"):
                await connection.execute(text(f"DROP TABLE IF EXISTS {table} CASCADE"))
        await engine.dispose()
        await asyncio.to_thread(upgrade, args.postgres)
        for forks in (0, FORKS):
            print(f"PostgreSQL, {'linear' if not forks else f'{forks} forks'}:")
            report(await measure(args.postgres, *await populate(args.postgres, forks)))


if __name__ == "__main__":
    run(main())
