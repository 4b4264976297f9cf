"""Daily use, rendered on the server: titles cut at a word, fork and import marks, a calm
meter ("Over" only for text being typed, advice for each case), the header's configuration
switch answering with the next send's meter, "New conversation" reusing an empty one, and
a rename that answers with the sidebar's link too."""

from __future__ import annotations

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import api_client, meter, new_conversation
from webapp.chat.stored.titles import (
    TITLE_MAX,
    cut_at_word,
    fork_title,
    import_title,
    split_mark,
    title_from,
)
from webapp.chat.web.views import Alternative, cut_line_words
from webapp.settings import Settings

pytestmark = pytest.mark.settings(max_message_chars=2000)

HTMX = {"hx-request": "true"}


@pytest.mark.parametrize(
    ("text", "limit", "cut"),
    [
        ("short", 60, "short"),
        ("one two three four", 12, "one two…"),
        ("one two three", 8, "one two…"),
        ("abcdefghijklmnop", 8, "abcdefg…"),
        ("  spaced\n out   words here ", 60, "spaced out words here"),
        ("first, second third", 10, "first…"),
    ],
)
def test_titles_are_cut_at_a_word(text: str, limit: int, cut: str) -> None:
    assert cut_at_word(text, limit) == cut
    assert len(cut_at_word(text, limit)) <= limit


def test_a_first_message_title_never_ends_mid_word() -> None:
    message = "Please explain how the suspension bridges of the nineteenth century were built"
    title = title_from(message)
    assert title.endswith("…") and len(title) <= 60
    assert message.startswith(title[:-1]) and message[len(title) - 1] == " "


def test_forks_and_imports_carry_a_mark_shown_apart() -> None:
    assert fork_title("Trips") == "Trips (fork)"
    assert split_mark(fork_title("Trips")) == ("Trips", "fork")
    assert split_mark(import_title("Trips")) == ("Trips", "imported")
    assert import_title(import_title("Trips")) == "Trips (imported)", "one mark, not two"
    assert split_mark("Trips") == ("Trips", None)
    assert len(fork_title("x" * TITLE_MAX)) == TITLE_MAX


def test_over_is_said_only_while_typed_text_would_leave_turns_out() -> None:
    assert not meter(dropped_turns=3).over, "a last send that trimmed is no alarm"
    assert not meter(dropped_turns=3, preview=True, typed=True).over, "the cut stays: calm"
    assert meter(dropped_turns=3, preview=True, typed=True, cut_moved=True).over
    assert not meter(dropped_turns=3, preview=True, cut_moved=True).over, "a switch's probe"
    assert meter(overflow_at_floor=True, preview=True, typed=True).over


def test_advice_is_written_for_each_case() -> None:
    assert meter(dropped_turns=2).advice is None
    alone = meter(dropped_turns=2, preview=True, typed=True).advice
    assert alone == "Pin the turns you need kept, or start a new conversation."
    alternatives = (Alternative("big", "big-model", 32000),)
    after_switch = meter(dropped_turns=2, preview=True, alternatives=alternatives).advice
    assert after_switch == "Or pin the turns you need kept."


def test_over_the_window_is_said_once() -> None:
    words = meter(overflow_at_floor=True, preview=True, typed=True).words
    assert "Over" not in words and "do not fit" in words


def test_the_cut_line_says_it_in_plain_words_short_enough_for_one_line() -> None:
    assert cut_line_words(11) == "The model no longer sees the 11 turns above"
    assert cut_line_words(1) == "The model no longer sees the turn above"
    preview = cut_line_words(1200, preview=True)
    assert preview == "The model will no longer see the 1,200 turns above"
    assert all(len(cut_line_words(n, preview=p)) <= 52 for n in (1, 99999) for p in (False, True))


async def test_new_conversation_reuses_an_empty_one(client: AsyncTestClient) -> None:
    first = await client.post("/c/new", data={"configuration": "small"}, headers=HTMX)
    second = await client.post("/c/new", data={"configuration": "small"}, headers=HTMX)
    assert first.status_code == second.status_code == 204
    assert first.headers["hx-redirect"] == second.headers["hx-redirect"]
    conversation_id = first.headers["hx-redirect"].rsplit("/", 1)[1]
    sent = await client.post(
        f"/api/conversations/{conversation_id}/messages", json={"content": "hi"}
    )
    assert sent.status_code == 201
    third = await client.post("/c/new", data={"configuration": "small"}, headers=HTMX)
    assert third.headers["hx-redirect"] != first.headers["hx-redirect"]
    listed = (await client.get("/api/conversations")).json()
    rows = listed if isinstance(listed, list) else listed["conversations"]
    assert len(rows) == 2


async def test_rename_answers_with_the_sidebar_link(client: AsyncTestClient) -> None:
    conversation = await new_conversation(client)
    response = await client.post(
        f"/c/{conversation['id']}/rename", data={"title": "Rivers (fork)"}, headers=HTMX
    )
    assert response.status_code == 200, response.text
    assert f'hx-target="#conv-{conversation["id"]}"' in response.text
    assert '<span class="conv-title">Rivers</span>' in response.text
    assert '<span class="tag tag-fork">fork</span>' in response.text


async def test_the_header_switch_answers_with_the_next_sends_meter(
    client: AsyncTestClient,
) -> None:
    conversation = await new_conversation(client)
    base = f"/api/conversations/{conversation['id']}"
    for number in range(1, 9):
        sent = await client.post(f"{base}/messages", json={"content": f"turn {number} " * 60})
        assert sent.status_code == 201
    configurations = (await client.get("/api/configurations")).json()
    names = [
        c["name"]
        for c in (
            configurations if isinstance(configurations, list) else configurations["configurations"]
        )
    ]
    other = next(name for name in names if name != conversation["configuration"])
    response = await client.post(
        f"/c/{conversation['id']}/configuration",
        data={"configuration": other, "content": "my draft"},
        headers=HTMX,
    )
    assert response.status_code == 200, response.text
    assert 'id="meter"' in response.text and 'data-preview="true"' in response.text
    assert 'id="configuration-picker"' in response.text
    assert (await client.get(base)).json()["configuration"] == other
    bad = await client.post(
        f"/c/{conversation['id']}/configuration", data={"configuration": "nope"}, headers=HTMX
    )
    assert bad.status_code == 400


async def test_a_refused_admin_form_keeps_what_was_typed(settings: Settings) -> None:
    async with api_client(settings, "root", admin=True) as admin:
        refused = await admin.post(
            "/admin/users", data={"username": "root", "password": "x", "is_admin": "on"}
        )
        assert 400 <= refused.status_code < 500, refused.text
        assert 'role="alert"' in refused.text and "<h1>Users</h1>" in refused.text
        assert 'value="root"' in refused.text and "checked" in refused.text
        assert 'value="x"' not in refused.text, "a password is never sent back"
        users = (await admin.get("/api/admin/users")).json()
        rows = users if isinstance(users, list) else users["users"]
        me = next(u for u in rows if u["username"] == "root")
        last = await admin.post(f"/admin/users/{me['id']}", data={"action": "deactivate"})
        assert last.status_code == 409 and "Not changed:" in last.text
        unknown = await admin.post(f"/admin/users/{me['id']}", data={"action": "explode"})
        assert unknown.status_code == 400 and "unknown action" in unknown.text


async def test_more_conversations_goes_on_under_the_same_heading(
    client: AsyncTestClient,
) -> None:
    for number in range(202):
        created = await client.post("/api/conversations", json={"title": f"c{number}"})
        assert created.status_code == 201
    first = await client.get("/conversations", params={"offset": 0})
    assert first.text.count('<h2 class="list-group">Today</h2>') == 1
    more = await client.get("/conversations", params={"offset": 200})
    assert more.status_code == 200
    assert '<h2 class="list-group">' not in more.text, "no second 'Today'"
    assert more.text.count("<li ") == 2
