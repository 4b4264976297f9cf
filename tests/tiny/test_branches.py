"""Branches through the conversation service against the real fake upstream, on SQLite
and PostgreSQL: what the upstream received, the stored spans and counts, and the
branch the API shows, all checked against a branch walked independently, row by row,
through the stored parent pointers."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import pytest
from sqlmodel import col, select

from tests.dbutil import session_on
from tests.factories import OWNER
from tests.tiny import TINY_SETTINGS, received_turns, turn_number
from tests.upstream import FakeUpstream
from webapp.admin.queries import review
from webapp.chat.jobs import ChatJobs
from webapp.chat.send import Send
from webapp.chat.stored.models import REPLAYABLE, Message, Role
from webapp.errors import Conflict, InvalidInput, NotFound
from webapp.stored import id_of

pytestmark = TINY_SETTINGS


async def all_rows(chat: ChatJobs, conversation_id: str) -> list[Message]:
    """Every stored row of every branch, by seq."""
    async with session_on(chat.db) as session:
        query = (
            select(Message)
            .where(Message.conversation_id == conversation_id)
            .order_by(col(Message.seq))
        )
        return list(await session.exec(query))


def path_to(rows: list[Message], leaf: int) -> list[int]:
    """The seqs of the branch ending at `leaf`, oldest first, walked one row at a time
    (independently of webapp.chat.stored.history's runs)."""
    by_seq = {r.seq: r for r in rows}
    seqs = []
    while leaf > 0:
        seqs.append(leaf)
        row = by_seq[leaf]
        leaf = row.parent_seq if row.parent_seq is not None else leaf - 1
    return seqs[::-1]


def number(row: Message) -> int:
    return turn_number(row.content)


def replayable_on(rows: list[Message], branch: list[int]) -> dict[int, int]:
    """User seq -> turn number, for the turns of `branch` whose answer is replayed."""
    by_seq = {r.seq: r for r in rows}
    on = set(branch)
    return {
        seq: number(by_seq[seq])
        for seq in branch
        if by_seq[seq].role == Role.USER
        and seq + 1 in on
        and by_seq[seq + 1].status in REPLAYABLE
        and by_seq[seq + 1].content
    }


async def settle(chat: ChatJobs, send: Send) -> tuple[Message, Message]:
    return await chat.sender.settle(send)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_every_send_carries_exactly_its_branch(
    chat: ChatJobs, upstream: FakeUpstream, seed: int
) -> None:
    """Random sends, edits, regenerates, branch switches, pins and failed answers in a
    window that trims: each send's request holds only turns of the branch it went down,
    its stored spans name only rows of that branch and exactly the replayable ones it did
    not carry, `prior_turns` counts that branch, and the API shows the active branch."""
    rng = random.Random(seed)
    conversation = await chat.editor.create(OWNER, "tiny")
    counter = 0
    sent: list[int] = []  # user seqs, in the order of the upstream's requests
    for step in range(30):
        rows = await all_rows(chat, conversation.id)
        users = [r for r in rows if r.role == Role.USER]
        if step > 3 and rng.random() < 0.12:
            upstream.fail_next(400)
        roll = rng.random()
        counter += 1
        words = "lorem ipsum dolor " * rng.randint(5, 14)
        if users and roll < 0.12:
            send = await chat.sender.send(
                OWNER, conversation.id, f"turn {counter}: edited {words}", rng.choice(users[-6:]).id
            )
        elif users and roll < 0.24:
            counter -= 1  # the same message again: its number stays
            send = await chat.sender.regenerate(OWNER, conversation.id, id_of(rng.choice(users)))
        else:
            if users and roll > 0.85:
                switched = await chat.editor.branch(OWNER, conversation.id, id_of(rng.choice(rows)))
                _, shown = await chat.reader.history(OWNER, conversation.id)
                leaf = switched.active_seq or max(r.seq for r in rows)
                assert [r.seq for r in shown] == path_to(rows, leaf)
            send = await chat.sender.send(OWNER, conversation.id, f"turn {counter}: {words}")
        user, answer = await settle(chat, send)
        sent.append(user.seq)
        _, shown = await chat.reader.history(OWNER, conversation.id)
        rows = await all_rows(chat, conversation.id)
        assert [r.seq for r in shown] == path_to(rows, answer.seq), "the new turn is active"
        if rng.random() < 0.25:
            await chat.editor.pin(OWNER, conversation.id, id_of(rng.choice(shown[::2])), True)

    rows = await all_rows(chat, conversation.id)
    by_seq = {r.seq: r for r in rows}
    chats = [r for r in upstream.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == len(sent) == len([r for r in rows if r.role == Role.USER])
    assert any(r.parent_seq is not None for r in rows), "the walk branched"
    trimmed = 0
    for seq, request in zip(sent, chats, strict=True):
        user = by_seq[seq]
        branch = path_to(rows, seq)[:-1]  # what the send continued
        replayable = replayable_on(rows, branch)
        received = received_turns(request) - {number(user)}
        assert received <= set(replayable.values()), (seq, received, replayable)
        spans = {s for first, last in user.fit_left_out or [] for s in range(first, last + 1)}
        assert spans <= set(branch), (seq, user.fit_left_out, branch)
        left_out = {s for s in replayable if s in spans}
        assert left_out == {s for s, n in replayable.items() if n not in received}
        assert user.dropped_turns == len(left_out)
        assert user.prior_turns == len(replayable)
        trimmed += bool(user.dropped_turns)
    assert trimmed >= 3, "the tiny window trims"

    # The admin review reads the stored spans: it names left-out turns of each send's branch.
    found = await chat.db.read(review, conversation.id)
    for turn in found.trimmed:
        assert set(found.left_out(turn)) <= set(path_to(rows, turn.seq))
    # and numbers each turn as its own branch counts it.
    for seq, shown_number in found.turn_numbers.items():
        assert shown_number == sum(by_seq[s].role == Role.USER for s in path_to(rows, seq))


async def test_edit_regenerate_and_alternatives(chat: ChatJobs, upstream: FakeUpstream) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    first, _ = await settle(chat, await chat.sender.send(OWNER, conversation.id, "turn 1: hello"))
    second, answer = await settle(
        chat, await chat.sender.send(OWNER, conversation.id, "turn 2: more")
    )
    # Edit the first message: the branch restarts from the root.
    edited, _ = await settle(
        chat, await chat.sender.send(OWNER, conversation.id, "turn 3: hi", edit_of=first.id)
    )
    assert edited.parent_seq == 0 and received_turns(upstream.requests[-1]) == {3}
    _, shown = await chat.reader.history(OWNER, conversation.id)
    assert [r.content for r in shown if r.role == Role.USER] == ["turn 3: hi"]
    alternatives = await chat.reader.alternatives_of(conversation.id, shown)
    assert alternatives[id_of(edited)].as_dict() == {
        "index": 1,
        "count": 2,
        "ids": [first.id, edited.id],
    }
    # Back to the first branch, then regenerate its second turn.
    await chat.editor.branch(OWNER, conversation.id, id_of(first))
    _, shown = await chat.reader.history(OWNER, conversation.id)
    assert [r.id for r in shown] == [first.id, id_of(first) + 1, second.id, answer.id]
    again, _ = await settle(
        chat, await chat.sender.regenerate(OWNER, conversation.id, id_of(second))
    )
    assert again.content == second.content and again.parent_seq == second.seq - 1
    assert received_turns(upstream.requests[-1]) == {1, 2}
    _, shown = await chat.reader.history(OWNER, conversation.id)
    assert [r.id for r in shown][:2] == [first.id, id_of(first) + 1] and shown[2].id == again.id
    alternatives = await chat.reader.alternatives_of(conversation.id, shown)
    assert alternatives[id_of(again)].ids == (id_of(second), id_of(again))
    assert alternatives[id_of(first)].count == 2
    # Nothing was deleted: every row of every branch is still there.
    assert len(await all_rows(chat, conversation.id)) == 8
    # The preview on a branch is the fit the send down that branch makes.
    await chat.editor.branch(OWNER, conversation.id, id_of(edited))
    preview = await chat.previewer.preview(OWNER, conversation.id, "turn 4: " + "lorem " * 200)
    sent, _ = await settle(
        chat, await chat.sender.send(OWNER, conversation.id, "turn 4: " + "lorem " * 200)
    )
    assert received_turns(upstream.requests[-1]) == {3, 4}
    assert preview.seq == sent.seq == 9 and sent.parent_seq == edited.seq + 1
    assert (preview.dropped_turns, preview.fit_left_out, preview.fit_estimated_tokens) == (
        sent.dropped_turns,
        sent.fit_left_out,
        sent.fit_estimated_tokens,
    )


async def test_fork_copies_the_branch_with_its_fit_facts(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "tiny", "Source")
    for n in range(1, 9):
        await settle(
            chat, await chat.sender.send(OWNER, conversation.id, f"turn {n}: " + "lorem " * 70)
        )
    rows = await all_rows(chat, conversation.id)
    third = rows[4]
    await settle(
        chat, await chat.sender.send(OWNER, conversation.id, "turn 9: x", edit_of=third.id)
    )
    for n in range(10, 17):
        await settle(
            chat, await chat.sender.send(OWNER, conversation.id, f"turn {n}: " + "lorem " * 70)
        )
    _, branch = await chat.reader.history(OWNER, conversation.id)
    trimmed = [r for r in branch if r.dropped_turns]
    assert trimmed, "some send on the branch left turns out"
    fork = await chat.editor.fork(OWNER, conversation.id, id_of(branch[-2]))
    assert fork.id != conversation.id and fork.configuration == "tiny"
    assert fork.title == "Source (fork)" and fork.owner == OWNER
    copied = await all_rows(chat, fork.id)
    assert [r.seq for r in copied] == list(range(1, len(branch) + 1))
    assert [r.content for r in copied] == [r.content for r in branch]
    assert all(r.parent_seq is None for r in copied)
    new_seq = {old.seq: new.seq for old, new in zip(branch, copied, strict=True)}
    for old, new in zip(branch, copied, strict=True):
        assert (new.dropped_turns, new.fit_budget, new.prior_turns) == (
            old.dropped_turns,
            old.fit_budget,
            old.prior_turns,
        )
        for (a, b), (c, d) in zip(old.fit_left_out or [], new.fit_left_out or [], strict=True):
            assert (new_seq[a], new_seq[b]) == (c, d)
    # A fork from a user row holds its answer; the source is untouched.
    half = await chat.editor.fork(OWNER, conversation.id, id_of(branch[2]))
    assert [r.content for r in await all_rows(chat, half.id)] == [r.content for r in branch[:4]]
    assert len(await all_rows(chat, conversation.id)) == len(rows) + 16
    # The fork goes on from its copy, as a linear conversation.
    user, _ = await settle(chat, await chat.sender.send(OWNER, fork.id, "turn 17: and on"))
    assert user.seq == len(branch) + 1
    last_copied = copied[-2].prior_turns
    assert last_copied is not None and user.prior_turns == last_copied + 1


async def test_bad_ids_are_refused_clearly(chat: ChatJobs, upstream: FakeUpstream) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    user, answer = await settle(chat, await chat.sender.send(OWNER, conversation.id, "turn 1: a"))
    other = await chat.editor.create(OWNER, "tiny")
    elsewhere, _ = await settle(chat, await chat.sender.send(OWNER, other.id, "turn 1: b"))
    for bad in (0, -1, 10**9, 2**63, 2**70, id_of(elsewhere)):
        with pytest.raises(NotFound):
            await chat.sender.send(OWNER, conversation.id, "turn 2: x", edit_of=bad)
        with pytest.raises(NotFound):
            await chat.sender.regenerate(OWNER, conversation.id, bad)
        with pytest.raises(NotFound):
            await chat.editor.branch(OWNER, conversation.id, bad)
        with pytest.raises(NotFound):
            await chat.editor.fork(OWNER, conversation.id, bad)
    with pytest.raises(InvalidInput, match="user's message"):
        await chat.sender.send(OWNER, conversation.id, "turn 2: x", edit_of=answer.id)
    with pytest.raises(InvalidInput, match="user's message"):
        await chat.sender.regenerate(OWNER, conversation.id, id_of(answer))
    calls: tuple[Callable[[str, str, int], Awaitable[object]], ...] = (
        chat.editor.branch,
        chat.editor.fork,
        chat.sender.regenerate,
    )
    for call in calls:
        with pytest.raises(NotFound):
            await call("mallory", conversation.id, id_of(user))
    with pytest.raises(NotFound):
        await chat.sender.send("mallory", conversation.id, "x", edit_of=user.id)
    # An edit while an answer is being written waits its turn, like any send.
    upstream.stall(1.0)
    busy = await chat.sender.send(OWNER, conversation.id, "turn 2: slow")
    with pytest.raises(Conflict):
        await chat.sender.send(OWNER, conversation.id, "turn 3: x", edit_of=user.id)
    with pytest.raises(Conflict):
        await chat.sender.regenerate(OWNER, conversation.id, id_of(user))
    await chat.sender.settle(busy)
    assert len(await all_rows(chat, conversation.id)) == 4


async def test_pages_walk_the_active_branch_back_across_its_runs(
    chat: ChatJobs, upstream: FakeUpstream
) -> None:
    conversation = await chat.editor.create(OWNER, "tiny")
    sent = []
    for n in range(1, 5):
        user, _ = await settle(chat, await chat.sender.send(OWNER, conversation.id, f"turn {n}: a"))
        sent.append(user)
    await settle(
        chat, await chat.sender.send(OWNER, conversation.id, "turn 5: b", edit_of=sent[2].id)
    )
    await chat.editor.branch(OWNER, conversation.id, id_of(sent[0]))
    _, original = await chat.reader.history(OWNER, conversation.id)
    assert [number(r) for r in original if r.role == Role.USER] == [1, 2, 3, 4]
    await settle(
        chat, await chat.sender.send(OWNER, conversation.id, "turn 6: c", edit_of=sent[1].id)
    )
    for n in range(7, 10):
        await settle(chat, await chat.sender.send(OWNER, conversation.id, f"turn {n}: d"))
    _, branch = await chat.reader.history(OWNER, conversation.id)
    assert [number(r) for r in branch if r.role == Role.USER] == [1, 6, 7, 8, 9]
    pages: list[list[Message]] = []
    before: int | None = None
    while True:
        _, rows, has_older = await chat.reader.page(
            OWNER, conversation.id, before_seq=before, turns=2
        )
        pages.insert(0, rows)
        if not has_older:
            break
        before = rows[0].seq
    assert [len(p) for p in pages] == [2, 4, 4]
    assert [r.id for p in pages for r in p] == [r.id for r in branch]
