"""Page streams send what changed: finished blocks once, the open block by what grew, and
the pages end on exactly the stored rendering."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from tests.page_stream_client import ANSWER, PageContent, sse_messages
from webapp.chat.stored.models import Message, Role, Status
from webapp.chat.web.live import Snapshot
from webapp.chat.web.page_stream import (
    SNAPSHOT_WAIT,
    LiveAnswer,
    PageCursor,
    SharedRendering,
    common_prefix,
    utf16_length,
)
from webapp.web.blocks import finished_end
from webapp.web.markdown import name_code_copies, render_markdown_async


def stored(text: str, html: str) -> Message:
    return Message(
        id=1, conversation_id="c", seq=2, role=Role.ASSISTANT, content=text,
        content_html=html, status=Status.COMPLETE,
    )  # fmt: skip


async def stream_through(text: str, step: int, pages: int = 2) -> tuple[list[PageContent], int]:
    """`text` grown `step` characters at a time; every page applies the frames it is sent.
    Returns the pages and the bytes sent to one page while the text grew (the end adds
    nothing, unless a render under a loaded machine's time limits came out otherwise)."""
    rendering = SharedRendering(whose="answer 1")
    cursors = [PageCursor() for _ in range(pages)]
    shown = [PageContent() for _ in range(pages)]
    sent = 0
    for end in [*range(step, len(text), step), len(text)]:
        await rendering.advance(text[:end])
        for index, cursor in enumerate(cursors):
            frame = rendering.update_for(cursor)
            if frame is not None:
                sent += len(frame) if index == 0 else 0
                ((_, data),) = sse_messages(frame.decode())
                shown[index].apply(json.loads(data))
    final = stored(text, str(await render_markdown_async(text)))
    await rendering.conclude(final)
    for index, cursor in enumerate(cursors):
        frame = rendering.update_for(cursor)
        if frame is not None:
            ((_, data),) = sse_messages(frame.decode())
            shown[index].apply(json.loads(data))
    return shown, sent


async def named_rendering(text: str) -> str:
    """The stored rendering as a page shows it (copy controls named)."""
    return name_code_copies(str(await render_markdown_async(text)), "answer 1")


async def test_pages_end_on_exactly_the_stored_rendering() -> None:
    expected = await named_rendering(ANSWER)
    for step in (1, 7, 40):
        shown, _ = await stream_through(ANSWER, step)
        assert [page.html for page in shown] == [expected, expected], f"step {step}"


async def test_one_long_paragraph_costs_about_its_size() -> None:
    text = " ".join(f"word{n}" for n in range(3000))  # one paragraph, 26,000 characters
    shown, sent = await stream_through(text, 60)
    final = await named_rendering(text)
    assert shown[0].html == final
    assert sent < 2 * len(final), f"{sent} bytes for {len(final)} of HTML"


async def test_one_long_code_block_costs_about_its_size() -> None:
    code = "".join(f"value_{n} = compute({n}, 'x')\n" for n in range(600))
    text = f"```python\n{code}```\n"
    shown, sent = await stream_through(text, 80)
    final = await named_rendering(text)
    assert shown[0].html == final
    assert sent < 2 * len(final), f"{sent} bytes for {len(final)} of HTML"


async def test_a_page_that_joins_late_gets_the_whole_answer_so_far() -> None:
    rendering = SharedRendering(whose="answer 1")
    early = PageCursor()
    await rendering.advance(ANSWER[:300])
    rendering.update_for(early)
    await rendering.advance(ANSWER[:600])
    late, page = PageCursor(), PageContent()
    frame = rendering.update_for(late)
    assert frame is not None
    ((event, data),) = sse_messages(frame.decode())
    page.apply(json.loads(data))
    assert event == "content"
    assert page.html == "".join(rendering.finished) + rendering.open_html
    assert rendering.update_for(late) is None, "up to date: nothing sent"


def test_finished_blocks_end_where_no_later_text_can_reach_back() -> None:
    assert finished_end("one\n\ntwo\n") == 5
    assert finished_end("one\n\ntwo") == 0, "the line after the blank is still being written"
    assert finished_end("- a\n\n- b\n") == 0, "a list item may make the list above loose"
    assert finished_end("    a\n\n    b\n") == 0, "indented code goes on after a blank line"
    assert finished_end("```\na\n\nb\n") == 0, "inside an open fence"
    assert finished_end("```\na\n\nb\n```\n\nc\n") == 14
    assert finished_end("$$\na\n\nb\n$$\n\nc\n") == 12
    assert finished_end("a ```b``` c\n\nd\n") == 13, "inline code is no fence"
    assert finished_end("one\n\ntwo\n\nthree\n", 5) == 10


def test_prefixes_and_lengths_as_a_browser_counts() -> None:
    assert common_prefix("<p>abc</p>", "<p>abcd</p>") == 6
    assert common_prefix("same", "same") == 4
    assert common_prefix("", "x") == 0
    assert utf16_length("a👋b") == 4


def snapshot(text: str, *, final: bool = False) -> Snapshot:
    answer = stored(text, "")
    answer.status = Status.COMPLETE if final else Status.STREAMING
    answer.content_html = None
    user = Message(id=2, conversation_id="c", seq=1, role=Role.USER, content="Hi", turn_number=1)
    return Snapshot(answer, user, final=final)


async def follow_page(live: LiveAnswer, page: PageContent, frames: list[bytes]) -> None:
    """A page's stream to its end: the `content` frames it was sent, applied to `page`."""
    async for frame in live.frames_for(PageCursor(), "page", lambda s: f"<p>{s.answer.status}</p>"):
        ((event, data),) = sse_messages(frame.decode())
        if event == "content":
            frames.append(frame)
            page.apply(json.loads(data))


async def test_every_page_of_an_answer_is_sent_the_same_frames_made_once() -> None:
    async def pieces() -> AsyncIterator[Snapshot]:
        for end in range(50, len(ANSWER), 50):
            yield snapshot(ANSWER[:end])
            await asyncio.sleep(0.01)
        yield snapshot(ANSWER, final=True)

    live = LiveAnswer(pieces())
    pages = [PageContent() for _ in range(3)]
    frames: list[list[bytes]] = [[] for _ in pages]
    await asyncio.wait_for(
        asyncio.gather(*(follow_page(live, p, f) for p, f in zip(pages, frames, strict=True))),
        30,
    )
    expected = await named_rendering(ANSWER)
    assert [page.html for page in pages] == [expected] * 3
    assert len(frames[0]) >= 3, "the answer came in several updates"
    # One frame object per step, written to every page at that step.
    assert all(a is b for a, b in zip(frames[0], frames[1], strict=False))
    assert all(a is b for a, b in zip(frames[0], frames[2], strict=False))


async def test_text_that_stops_short_is_shown_without_waiting_for_more() -> None:
    more = asyncio.Event()

    async def pieces() -> AsyncIterator[Snapshot]:
        yield snapshot("Hello")
        await asyncio.sleep(0.1)
        yield snapshot("Hello there")  # under SNAPSHOT_CHARS more, then nothing for long
        await more.wait()
        yield snapshot("Hello there.", final=True)

    live = LiveAnswer(pieces())
    page = PageContent()
    following = asyncio.create_task(follow_page(live, page, []))
    started = asyncio.get_running_loop().time()
    while "there" not in page.html:
        assert asyncio.get_running_loop().time() - started < 5, "never shown"
        await asyncio.sleep(0.01)
    waited = asyncio.get_running_loop().time() - started
    assert waited < SNAPSHOT_WAIT + 1.0, f"shown after {waited:.2f} s"
    more.set()
    await asyncio.wait_for(following, 5)
    assert page.html == "<p>Hello there.</p>\n"


async def test_a_page_loaded_mid_answer_is_sent_no_less_than_it_shows() -> None:
    async def pieces() -> AsyncIterator[Snapshot]:
        for end in range(1, 12):
            yield snapshot("Hello there."[:end])
            await asyncio.sleep(0.06)
        yield snapshot("Hello there.", final=True)

    live = LiveAnswer(pieces())
    cursor = PageCursor(floor=8)  # the page showed "Hello th" when it connected
    page, shown = PageContent(), []
    async for frame in live.frames_for(cursor, "page", lambda s: ""):
        ((event, data),) = sse_messages(frame.decode())
        if event == "content":
            page.apply(json.loads(data))
            shown.append(page.html)
    assert shown, "nothing was sent"
    assert all("Hello th" in html for html in shown), shown


async def test_a_follower_that_fails_ends_its_pages() -> None:
    async def pieces() -> AsyncIterator[Snapshot]:
        yield snapshot("Hello")
        raise RuntimeError("the conversation went away")

    live = LiveAnswer(pieces())
    await asyncio.wait_for(follow_page(live, PageContent(), []), 5)
    assert live.failed and not live.final
