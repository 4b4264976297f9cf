"""Which tool results a request carries as one-line stubs, and what those stubs say.

Tool results are the largest messages of a conversation. Clearing the oldest one on
every send (the usual "keep the last N results") rewrites an earlier message each time,
and the engine, which reuses only the prefix a prompt shares with its previous one,
evaluates everything after it again. So results are cleared on the cut's own rhythm
(`webapp.llm.window`): only when the cut moves, and then every result older than the
newest `keep` answered turns at once (the turn being answered keeps all of its own).
Between two moves a request clears exactly what the previous one did, so it is the
previous request plus what was appended. The stored result is never changed: a stub
exists only in the request.

Indices here are positions in the messages given to `fit`; `through` is where the
previous request's clearing ended (results before it are cleared, 0: none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webapp.llm.estimator import estimate_message
from webapp.llm.providers.base import Message


def results(messages: Sequence[Message]) -> list[int]:
    """Indices of the tool results among `messages`."""
    return [i for i, message in enumerate(messages) if message.get("role") == "tool"]


def boundary(turns: Sequence[Sequence[int]], keep: int) -> int:
    """Where a move's clearing ends: the first message of the newest `keep` answered
    turns before the newest turn (`turns` as `window.split_turns` gives them)."""
    if not turns:
        return 0
    return turns[max(len(turns) - 1 - max(keep, 0), 0)][0]


def stub(message: Message, tokens: int) -> dict[str, Any]:
    """A result as a cleared request carries it: the same call, one line that names the
    tool and the tokens left out, and says the tool can be called again."""
    name = str(message.get("name") or "tool")
    text = f"[result of tool {name} cleared: {tokens:,} tokens; call it again if it is needed]"
    return {**message, "content": text}


def stub_size(message: Message, tokens: int) -> int:
    return estimate_message(stub(message, tokens))


def said(cleared: Sequence[dict[str, int]] | None) -> str | None:
    """'3 older tool results cleared, 12,410 tokens' for stored `cleared` spans (None
    when there are none): what the turn's note and the review say."""
    if not cleared:
        return None
    count = sum(span["last_seq"] - span["first_seq"] + 1 for span in cleared)
    tokens = sum(span["tokens"] for span in cleared)
    noun = "result" if count == 1 else "results"
    return f"{count:,} older tool {noun} cleared, {tokens:,} tokens"


def seq_spans(
    cleared: Sequence[tuple[int, int]], seqs: Sequence[int | None]
) -> list[dict[str, int]]:
    """Cleared (index, tokens) pairs as stored spans: runs of consecutive seqs (the
    results of one step are stored one after the other), each with its tokens."""
    spans: list[dict[str, int]] = []
    for seq, tokens in sorted(
        (seq, tokens) for index, tokens in cleared if (seq := seqs[index]) is not None
    ):
        if spans and spans[-1]["last_seq"] == seq - 1:
            spans[-1]["last_seq"] = seq
            spans[-1]["tokens"] += tokens
        else:
            spans.append({"first_seq": seq, "last_seq": seq, "tokens": tokens})
    return spans


def through_index(seqs: Sequence[int | None], messages: Sequence[Message], last_seq: int) -> int:
    """The previous request's clearing for this transcript: one past the last result
    stored at or before `last_seq` (the newest seq it cleared; 0: it cleared none)."""
    through = 0
    if last_seq <= 0:
        return 0
    for index in results(messages):
        seq = seqs[index]
        if seq is not None and seq <= last_seq:
            through = index + 1
    return through
