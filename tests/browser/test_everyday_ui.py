"""Everyday chat in a real Chromium (issue "Everyday chat"): code and math, the trim
line, search, export and import, each test breaking when its feature does."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import OpenPage, Server
from tests.browser.test_chat_ui import answered, create_conversation, messages
from tests.upstream import FakeUpstream

pytestmark = pytest.mark.browser

RICH = r"""Here is the code:

```python
def area(r):
    return 3.14 * r ** 2  # circle
```

The area is $A = \pi r^2$, with a thin space: \(x\,y\). Docs: https://example.com/math
"""


def test_code_is_coloured_and_copies_math_is_mathml_links_open_a_new_tab(
    live_server: Server, upstream: FakeUpstream, open_page: OpenPage
) -> None:
    upstream.set_reply(RICH)
    conversation_id = create_conversation(live_server)
    page = open_page(live_server, f"/c/{conversation_id}")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator("#composer textarea").fill("Show me")
    page.locator("#composer textarea").press("Enter")
    answered(page, 1)

    for _ in range(2):  # as streamed, then as stored
        content = messages(page, "assistant").last.locator(".content")
        expect(content.locator("pre code .k").first).to_have_text("def")
        expect(content.locator("pre code .c1")).to_have_text("# circle")
        expect(content.locator("math")).to_have_count(2)
        expect(content.locator("math mspace")).to_have_count(1)  # `\,` is a space, not ","
        link = content.locator('a[href="https://example.com/math"]')
        expect(link).to_have_attribute("target", "_blank")
        expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
        page.reload()

    content = messages(page, "assistant").last.locator(".content")
    copy = content.locator('[data-action="copy-code"]')
    copy.click()
    expect(copy).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("def area(r):\n    return 3.14 * r ** 2  # circle")
    # MathML is drawn by the browser itself: the formula has a real size.
    box = content.locator("math").first.bounding_box()
    assert box is not None and box["width"] > 20
