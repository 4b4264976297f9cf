"""What a page following an answer's stream shows, as chat.js builds it from `content` events:
the HTML strings a browser would parse, one per update (for tests without a browser)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

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
"""An answer with every kind of block a page must end on exactly as stored."""


@dataclass
class PageContent:
    """An answer's content as a page holds it: finished blocks, then the open block."""

    finished: list[str] = field(default_factory=list)
    open_html: str = ""

    @property
    def html(self) -> str:
        return "".join(self.finished) + self.open_html

    def apply(self, patch: dict[str, object]) -> None:
        if "r" in patch:
            self.finished, self.open_html = [str(patch["r"])], ""
        kept = _utf16_slice(self.open_html, int(str(patch["k"])))
        done = patch.get("f")
        if isinstance(done, list):
            self.finished += [kept + str(done[0]), *map(str, done[1:])]
            self.open_html = str(patch["o"])
        else:
            self.open_html = kept + str(patch["o"])


def _utf16_slice(text: str, units: int) -> str:
    return text.encode("utf-16-le")[: 2 * units].decode("utf-16-le")


def sse_messages(body: str) -> list[tuple[str | None, str]]:
    """(event name or None, data) of each message of an SSE body."""
    messages = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        event = next((line[6:].strip() for line in lines if line.startswith("event:")), None)
        data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
        messages.append((event, data))
    return messages


def shown_states(body: str) -> list[str]:
    """The content's HTML after each `content` event of a page stream's body."""
    page = PageContent()
    states = []
    for event, data in sse_messages(body):
        if event == "content":
            page.apply(json.loads(data))
            states.append(page.html)
    return states
