"""Benchmark: what each conversation's key saves on a llama.cpp server with several slots.

Eight conversations take turns on one model served by the fake llama.cpp of tests/upstream/
with four slots, each slot keeping only the prompt it last evaluated
(`tests.upstream.slots`): a request naming a slot (`id_slot`) takes it; any other takes
the slot llama.cpp's server chooses, the idle slot whose prompt shares the longest prefix
with the request's if that is more than `--slot-prompt-similarity` of it (0.1 by
default), else the least recently used one. The server's host-memory prompt cache
(`--cache-ram`) is off.

Every send goes through the app's conversation service (`ChatJobs.sender`), so the key
and the slot are the app's own: the provider once with `cache_key = "auto"` (it reads the
four slots from `/slots` and sends each conversation's `id_slot`) and once with
`cache_key = "off"` (no key). Each conversation's title call is made as the app makes it
after the first answer (without a key, so it takes whichever slot the server chooses). The
engine's prompt tokens evaluated (prompt minus what the slot served) are summed over every
request of the round, titles included.

Three orders of the same 96 sends (12 a conversation on average): strict rotation, a
random conversation each send, and bursts (a random conversation sends 1 to 6 turns in a
row, as a person does); and, beside them, three conversations in random order (fewer
than the slots, as on a server a few people share). Each at the server's default
similarity (0.1) and with the search off (0, which makes the unkeyed choice the least
recently used slot: a conversation's follow-up goes to another slot, as round-robin does).

Each conversation's key maps it to a slot by a hash, so which conversations share a slot
changes with the conversations' ids: the keyed rounds are run several times over new
conversations, and the median reported. Beside them, the clairvoyant choice
(`clairvoyant`): about the least any choice of slots, by key or by the server, could
evaluate for the same requests.

Target (issue 41): evaluated prompt tokens with keys at most 1/3 of without.

    make bench-cache    (or: python -m bench.slots)
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
from collections import Counter
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

from bench.common import fresh_sqlite, git_revision, machine
from bench.service import chat_service
from tests.factories import add_user
from tests.upstream import FakeUpstream
from tests.upstream.cache import _shared_prefix
from webapp.chat.jobs import ChatJobs
from webapp.chat.stored.models import Status
from webapp.chat.stored.titles import title_from
from webapp.llm.affinity import CacheKeys, slot_for
from webapp.owners import user_owner
from webapp.stored import id_of

CONVERSATIONS = 8
SLOTS = 4
SENDS = 96
SIMILARITIES = {"0.1 (default)": 0.1, "0 (off)": 0.0}
TARGET = 1 / 3
SYSTEM_PROMPT = "You are a patient tutor. Answer in plain prose."
SECRET = "bench-slots-secret-0123456789abcdef"
TOPICS = (
    "the history of the printing press and how movable type spread through Europe",
    "why sourdough needs a starter, and what the bacteria and yeasts do in it",
    "how a heat pump moves heat uphill, with the refrigerant cycle step by step",
    "the rules of go for a beginner, with a note on ko and seki",
    "what a B-tree is and why databases keep their indexes in them",
    "how tides follow the moon, and why there are two a day",
    "the way a violin's body shapes its sound",
    "why the sky is blue at noon and red at sunset",
)


def rotation(rnd: random.Random, count: int) -> list[int]:
    return [n % count for n in range(SENDS)]


def scattered(rnd: random.Random, count: int) -> list[int]:
    return [rnd.randrange(count) for _ in range(SENDS)]


def bursts(rnd: random.Random, count: int) -> list[int]:
    order: list[int] = []
    while len(order) < SENDS:
        order += [rnd.randrange(count)] * rnd.randint(1, 6)
    return order[:SENDS]


ORDERS = {
    "rotation": (rotation, CONVERSATIONS),
    "random": (scattered, CONVERSATIONS),
    "bursts of 1-6": (bursts, CONVERSATIONS),
    "random, 3 conversations": (scattered, 3),
}
"""The orders of sends: eight conversations as the issue asks, and three (fewer than the
slots, as on a server a few people share)."""


def catalog_toml(upstream: FakeUpstream, cache_key: str) -> str:
    return f"""
[[providers]]
name = "engine"
kind = "openai"
base_url = "{upstream.base_url}"
cache_key = "{cache_key}"
timeout = 30

[[models]]
name = "m"
provider = "engine"
model_id = "w"
context_window = 32768
max_output_tokens = 400

[[configurations]]
name = "tutor"
model = "m"
system_prompt = "{SYSTEM_PROMPT}"
"""


def user_text(conversation: int, turn: int) -> str:
    topic = TOPICS[conversation]
    return f"Turn {turn}: tell me more about {topic}. " + "Please go into detail. " * (4 + turn % 5)


def answer_text(conversation: int, turn: int) -> str:
    return f"Answer {turn} on {TOPICS[conversation]}. " + " ".join(
        f"Point {i}: {TOPICS[(conversation + i) % len(TOPICS)]}." for i in range(4 + turn % 7)
    )


def service(database_url: str, folder: Path, toml: str) -> AbstractAsyncContextManager[ChatJobs]:
    """The conversation service as the app builds it, keys from the app's secret."""
    return chat_service(
        database_url, folder / "slots.toml", toml, keys=CacheKeys(SECRET), secret_key=SECRET
    )


@dataclass
class Round:
    evaluated: int = 0
    prompt: int = 0
    requests: int = 0
    failed: int = 0
    spread: str = ""
    """Conversations per slot, keyed rounds only (the keys' own spread)."""
    prompts: list[tuple[str, list[int]]] | None = None
    """Each request's owner (a conversation, or a title call of its own) and prompt."""


INF = float("inf")


def _next_use(prompts: list[tuple[str, list[int]]], at: int, owner: str) -> float:
    """The index of `owner`'s next request after `at`, or infinity."""
    return next((i for i in range(at + 1, len(prompts)) if prompts[i][0] == owner), INF)


def clairvoyant(prompts: list[tuple[str, list[int]]]) -> int:
    """The prompt tokens evaluated by a slot choice that knows the future (Belady's): a
    request goes to the slot holding its conversation's last prompt, else to the slot
    whose conversation comes back last, or never. Nearly the least any choice of slots
    could evaluate for these requests: what no key, nor any server, can do better than
    (near enough: it counts requests, not tokens)."""
    held: list[tuple[str, list[int]] | None] = [None] * SLOTS
    evaluated = 0
    for at, (owner, tokens) in enumerate(prompts):
        slot = next((n for n, h in enumerate(held) if h is not None and h[0] == owner), None)
        if slot is None:
            back = [_next_use(prompts, at, h[0]) if h is not None else INF for h in held]
            slot = max(range(SLOTS), key=back.__getitem__)
        holder = held[slot]
        shared = _shared_prefix(holder[1], tokens) if holder is not None else 0
        evaluated += len(tokens) - min(shared, len(tokens) - 1)
        held[slot] = (owner, tokens)
    return evaluated


async def one_round(
    upstream: FakeUpstream, folder: Path, order: list[int], similarity: float, keyed: bool
) -> Round:
    upstream.reset()
    upstream.set_engine("llamacpp")
    upstream.set_models({"w": 32768})
    upstream.slot_count = SLOTS
    upstream.slot_local = similarity
    name = f"{len(order)}-{similarity}-{keyed}"
    url = fresh_sqlite(folder / f"{name}.db")
    result = Round()
    async with service(url, folder, catalog_toml(upstream, "auto" if keyed else "off")) as chat:
        # A signed-in user's conversations: the model titles them after the first answer.
        owner = user_owner(id_of(await add_user(chat, "bench")))
        count = max(order) + 1
        ids = [(await chat.editor.create(owner, "tutor")).id for _ in range(count)]
        turns = [0] * count
        for conversation in order:
            turn = turns[conversation]
            turns[conversation] += 1
            upstream.set_reply(answer_text(conversation, turn))
            said = user_text(conversation, turn)
            send = await chat.sender.send(owner, ids[conversation], said)
            async for _ in send.running.channel.follow():
                pass
            _, answer = await chat.sender.settle(send)
            if answer.status != Status.COMPLETE:
                result.failed += 1
            if turn == 0:  # the title call, off the send path: done before the next send
                await chat.titler.title_after(owner, ids[conversation], title_from(said))
        if keyed:
            keys = CacheKeys(SECRET)
            per_slot = Counter(slot_for(keys.key(i), SLOTS) for i in ids)
            result.spread = "/".join(str(per_slot[s]) for s in range(SLOTS))
    for record in upstream.cache_log:
        result.requests += 1
        result.prompt += record.prompt_tokens
        result.evaluated += record.prompt_tokens - record.cached_tokens
    result.prompts = []
    chats = [r["body"] for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    for n, body in enumerate(chats):
        users = [m["content"] for m in body["messages"] if m["role"] == "user"]
        owner = next((t for t in TOPICS if t in users[0]), "") if users else ""
        is_title = body["messages"][0]["content"] != SYSTEM_PROMPT
        result.prompts.append(
            (f"title {n}" if is_title else owner, upstream.tokenize_chat(body["messages"]))
        )
    return result


async def main(seed: int, repeats: int) -> None:
    print(f"# conversations on a {SLOTS}-slot llama.cpp, {machine()}, revision {git_revision()}")
    print(
        f"# {SENDS} sends a round (seed {seed}); fake "
        "llama.cpp with slot-local caches (each slot its last prompt), --cache-ram 0; "
        f"keyed rounds {repeats} times (new conversations, so new keys, each time): median, "
        "least and most\n"
    )
    print(
        "| order | --slot-prompt-similarity | evaluated without keys | with keys (median) "
        "| with / without: median (least-most) | conversations per slot (median round) "
        "| clairvoyant / without | failed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    misses: list[str] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeUpstream(engine="llamacpp", models={"w": 32768}) as upstream,
    ):
        folder = Path(tmp)
        for order_name, (make, count) in ORDERS.items():
            order = make(random.Random(seed), count)
            for similarity_name, similarity in SIMILARITIES.items():
                off = await one_round(upstream, folder, order, similarity, keyed=False)
                keyed = [
                    await one_round(upstream, folder, order, similarity, keyed=True)
                    for _ in range(repeats)
                ]
                keyed.sort(key=lambda done: done.evaluated)
                on = keyed[len(keyed) // 2]
                ratios = [done.evaluated / max(1, off.evaluated) for done in keyed]
                ratio = statistics.median(ratios)
                best = clairvoyant(off.prompts or []) / max(1, off.evaluated)
                failed = off.failed + sum(done.failed for done in keyed)
                print(
                    f"| {order_name} | {similarity_name} | {off.evaluated:,} of {off.prompt:,} "
                    f"| {on.evaluated:,} | {ratio:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f}) "
                    f"| {on.spread} | {best:.3f} | {failed} |"
                )
                if ratio > TARGET:
                    misses.append(f"{order_name} at {similarity_name}: {ratio:.3f}")
                if failed:
                    misses.append(f"{order_name} at {similarity_name}: failed sends")
    print()
    print(
        f"target (with keys at most {TARGET:.3f} of without) met everywhere"
        if not misses
        else "TARGET MISSED: " + "; ".join(misses)
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.seed, arguments.repeats))
