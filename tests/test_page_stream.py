"""Page streams send what changed: finished blocks once, the open block by what grew, and
the pages end on exactly the stored rendering."""

from __future__ import annotations

import json

from tests.page_stream_client import PageContent, sse_messages
from webapp.chat.models import Message, Role, Status
from webapp.chat.page_stream import PageCursor, SharedRendering, common_prefix, utf16_length
from webapp.web.blocks import finished_end
from webapp.web.markdown import render_markdown_async

ANSWER = """Here is a plan, with *emphasis* and `code`.

1. First item
2. Second item

- loose item

- another loose item

| Name | Value |
|------|-------|
| pi | 3.14 |
| e | 2.72 |

$$
\\int_0^1 x^2 \\, dx = \\frac{1}{3}
$$

Inline math $a^2 + b^2 = c^2$ and \\(x\\).

```python
def greet(name):

    return f"Hello, {name} 👋"
```

    indented code

    more indented code

> A quote
> that goes on.

Setext heading
==============

See [the docs][docs] for more 🙂.

[docs]: https://example.com/docs
"""


def stored(text: str, html: str) -> Message:
    return Message(
        id=1, conversation_id="c", seq=2, role=Role.ASSISTANT, content=text,
        content_html=html, status=Status.COMPLETE,
    )  # fmt: skip


async def stream_through(text: str, step: int, pages: int = 2) -> tuple[list[PageContent], int]:
    """`text` grown `step` characters at a time; every page applies the frames it is sent.
    Returns the pages and the bytes sent to one page while the text grew (the end adds
    nothing, unless a render under a loaded machine's time limits came out otherwise)."""
    rendering = SharedRendering()
    cursors = [PageCursor() for _ in range(pages)]
    shown = [PageContent() for _ in range(pages)]
    sent = 0
    for end in [*range(step, len(text), step), len(text)]:
        await rendering.advance(text[:end])
        for index, cursor in enumerate(cursors):
            frame = rendering.update_for(cursor, str(end))
            if frame is not None:
                sent += len(frame) if index == 0 else 0
                ((_, data),) = sse_messages(frame.decode())
                shown[index].apply(json.loads(data))
    final = stored(text, str(await render_markdown_async(text)))
    await rendering.conclude(final)
    for index, cursor in enumerate(cursors):
        frame = rendering.update_for(cursor, str(len(text)))
        if frame is not None:
            ((_, data),) = sse_messages(frame.decode())
            shown[index].apply(json.loads(data))
    return shown, sent


async def test_pages_end_on_exactly_the_stored_rendering() -> None:
    expected = str(await render_markdown_async(ANSWER))
    for step in (1, 7, 40):
        shown, _ = await stream_through(ANSWER, step)
        assert [page.html for page in shown] == [expected, expected], f"step {step}"


async def test_one_long_paragraph_costs_about_its_size() -> None:
    text = " ".join(f"word{n}" for n in range(3000))  # one paragraph, 26,000 characters
    shown, sent = await stream_through(text, 60)
    final = str(await render_markdown_async(text))
    assert shown[0].html == final
    assert sent < 2 * len(final), f"{sent} bytes for {len(final)} of HTML"


async def test_one_long_code_block_costs_about_its_size() -> None:
    code = "".join(f"value_{n} = compute({n}, 'x')\n" for n in range(600))
    text = f"```python\n{code}```\n"
    shown, sent = await stream_through(text, 80)
    final = str(await render_markdown_async(text))
    assert shown[0].html == final
    assert sent < 2 * len(final), f"{sent} bytes for {len(final)} of HTML"


async def test_a_page_that_joins_late_gets_the_whole_answer_so_far() -> None:
    rendering = SharedRendering()
    early = PageCursor()
    await rendering.advance(ANSWER[:300])
    rendering.update_for(early, "300")
    await rendering.advance(ANSWER[:600])
    late, page = PageCursor(), PageContent()
    frame = rendering.update_for(late, "600")
    assert frame is not None
    ((event, data),) = sse_messages(frame.decode())
    page.apply(json.loads(data))
    assert event == "content"
    assert page.html == "".join(rendering.finished) + rendering.open_html
    assert rendering.update_for(late, "600") is None, "up to date: nothing sent"


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
