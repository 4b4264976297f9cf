"""A window set larger than the engine runs (issue 22): the catalog declares 1,400 tokens
for a model the engine was started with `-c 1024`. The engine's refusal names its window;
that window is learned, stored on the model's calibration row, used by the fit, shown by
`webapp check-config` and the admin review, and the retry fits it: the turn succeeds.
With exact counts (llama.cpp's /tokenize) and with the estimate, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.catalogs import engine_provider_toml
from tests.factories import (
    OWNER,
    add_user,
    admin_client,
    probed_service,
    run_on,
    say,
    service_settings_on,
)
from tests.upstream import FakeUpstream
from webapp.chat.stored.models import Status
from webapp.llm.calibration import learned_windows

ENGINE_WINDOW = 1024
CARD_WINDOW = 1400


def card_toml(upstream: FakeUpstream) -> str:
    return (
        engine_provider_toml(upstream)
        + f"""
[[models]]
name = "card"
provider = "engine"
model_id = "small"
context_window = {CARD_WINDOW}
max_output_tokens = 200

[[models]]
name = "card-guess"
provider = "engine"
model_id = "small"
context_window = {CARD_WINDOW}
max_output_tokens = 200
tokenizer = "estimate"

[[configurations]]
name = "card"
model = "card"

[[configurations]]
name = "card-guess"
model = "card-guess"
"""
    )


def chats(upstream: FakeUpstream) -> int:
    return sum(r["path"] == "/v1/chat/completions" for r in upstream.requests)


@pytest.mark.parametrize(
    ("configuration", "counted_by"), [("card", "server:card"), ("card-guess", "estimate")]
)
async def test_the_engines_window_is_learned_and_the_turn_succeeds(
    database_url: str, tmp_path: Path, upstream: FakeUpstream, configuration: str, counted_by: str
) -> None:
    upstream.set_engine("llamacpp")
    upstream.set_models({"small": ENGINE_WINDOW})  # the engine's -c, smaller than the card
    path = tmp_path / "card.toml"
    path.write_text(card_toml(upstream), encoding="utf-8")
    settings = service_settings_on(database_url, path, rate_limit_messages=0)
    async with probed_service(settings) as chat:
        conversation = await chat.editor.create(OWNER, configuration)
        refused_once = False
        for number in range(16):
            before = chats(upstream)
            user, answer = await say(
                chat, conversation.id, f"turn {number}: " + "rivers and bridges " * 60
            )
            assert answer.status == Status.COMPLETE, (number, answer.error)
            assert (user.fit_counted_by or "").startswith(counted_by)
            if chats(upstream) - before == 2:  # refused, then the re-fitted retry
                assert not refused_once, "the engine refuses once, then the window is known"
                refused_once = True
                assert user.fit_window == ENGINE_WINDOW
        assert refused_once, "the conversation should outgrow the engine's window"
        assert chat.manager.calibrator.window(configuration) == ENGINE_WINDOW
        assert user.fit_window == ENGINE_WINDOW and (user.dropped_turns or 0) > 0
        root = await add_user(chat, "root", admin=True)

    # A restart (a new service on the same database) fits to it from the first send.
    async with probed_service(settings) as chat:
        assert chat.manager.calibrator.window(configuration) == ENGINE_WINDOW
        assert await chat.db.read(learned_windows) == [(configuration, ENGINE_WINDOW)]
        before = chats(upstream)
        user, answer = await say(chat, conversation.id, "after the restart")
        assert answer.status == Status.COMPLETE, answer.error
        assert chats(upstream) - before == 1, "not refused"
        assert user.fit_window == ENGINE_WINDOW

    async with admin_client(settings, {"root": root}) as client:
        page = await client.get("/admin/trimmed", headers={"x-test-user": "root"})
    assert page.status_code == 200
    assert 'id="learned-windows"' in page.text and f"{configuration} 1,024 tokens" in page.text

    checked = run_on(database_url, "check-config", str(path))
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    at = lines.index(next(line for line in lines if f"model {configuration!r}:" in line))
    assert f"window {CARD_WINDOW:,} (configured)" in lines[at]
    assert any(
        "learned window 1,024" in line
        for line in lines[at + 1 : at + 5]
        if not line.startswith("  model")
    ), checked.stdout


async def test_a_refusal_naming_no_smaller_window_teaches_no_window(
    sqlite_url: str, tmp_path: Path, upstream: FakeUpstream
) -> None:
    """The engine's window is the catalog's: nothing is learned as a window, and a model
    the engine never refused has none."""
    upstream.set_engine("llamacpp")
    upstream.set_models({"small": CARD_WINDOW})
    path = tmp_path / "card.toml"
    path.write_text(card_toml(upstream), encoding="utf-8")
    settings = service_settings_on(sqlite_url, path, rate_limit_messages=0)
    async with probed_service(settings) as chat:
        conversation = await chat.editor.create(OWNER, "card")
        for number in range(12):
            _, answer = await say(chat, conversation.id, f"{number}: " + "rivers " * 30)
            assert answer.status == Status.COMPLETE
        assert chat.manager.calibrator.window("card") is None
        assert await chat.db.read(learned_windows) == []
