"""Where stateless gateway calls keep their cut: only a call that continues the caller's
previous call (same head, same messages first, same model) keeps it, in bounded memory."""

from __future__ import annotations

from webapp.gateway.cuts import StatelessCuts
from webapp.llm.catalog import ModelSpec
from webapp.llm.window import fit

MODEL = ModelSpec(name="m", provider="p", model_id="m", context_window=1024, max_output_tokens=64)


def conversation(turns: int, tag: str = "") -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": f"Be brief.{tag}"}]
    for turn in range(turns):
        messages += [
            {"role": "user", "content": f"question {turn} " + "word " * 60},
            {"role": "assistant", "content": f"answer {turn} " + "word " * 60},
        ]
    return [*messages, {"role": "user", "content": "newest"}]


def test_a_continuing_call_keeps_the_cut_and_any_other_starts_afresh() -> None:
    cuts = StatelessCuts()
    first = conversation(12)
    result = fit(first, MODEL, trim_to=0.75)
    assert result.left_out
    cuts.remember("alice", "small", first, result)
    continued = [
        *first,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "more"},
    ]
    assert cuts.keep_from("alice", "small", "m", continued) == result.left_out[-1][1] + 1
    assert cuts.keep_from("bob", "small", "m", continued) == 0, "another caller's cut"
    assert cuts.keep_from("alice", "other", "m", continued) == 0, "another configuration"
    assert cuts.keep_from("alice", "small", "fallback", continued) == 0, "another model"
    assert cuts.keep_from("alice", "small", "m", first) == 0, "not longer than before"
    edited = [dict(m) for m in continued]
    edited[5]["content"] = "changed"
    assert cuts.keep_from("alice", "small", "m", edited) == 0, "an earlier message changed"


def test_memory_is_bounded_and_the_least_recent_goes_first() -> None:
    cuts = StatelessCuts(size=3)
    calls = [conversation(12, tag=str(n)) for n in range(4)]
    for messages in calls:
        cuts.remember("alice", "small", messages, fit(messages, MODEL, trim_to=0.75))
    extend = [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    assert cuts.keep_from("alice", "small", "m", [*calls[0], *extend]) == 0, "forgotten"
    assert all(cuts.keep_from("alice", "small", "m", [*c, *extend]) > 0 for c in calls[1:])
