"""Model output as HTML that cannot act: markdown without raw HTML, then sanitized.

Model text is untrusted. markdown-it renders it with raw HTML off (code coloured by
Pygments, math turned into MathML, bare URLs linked), and nh3 (ammonia) keeps only a
small set of tags, attributes and classes, so no script, no `on*` handler and no
`hx-*` attribute survives (htmx would act on those), and links keep only safe schemes
and open in a new tab. The copy control of each code block is added after sanitizing:
it is ours, not the model's, and model text can never produce a `<pre>` of its own.

Rendering never runs long on the event loop. A short text without a code fence (at most
`INLINE_CHARS`) renders where it is asked for, in a few milliseconds at most. Any other
text renders in a render worker, a process of its own with a deadline
(webapp.web.render_workers), where code blocks are coloured under a time limit
(webapp.web.highlight); a text the worker cannot finish in time is shown as
plain paragraphs. On the loop, callers use `render_markdown_async` (answers, imports) or
`prerendered` (pages and stream updates, whose templates read `html` synchronously).
"""

from __future__ import annotations

import asyncio
import logging
import re
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from webapp.web import render_workers
from webapp.web.highlight import LANGUAGE_CLASSES, TOKEN_CLASSES, highlight_code
from webapp.web.mathml import MATHML_ATTRIBUTES, MATHML_TAGS, math_plugin

log = logging.getLogger(__name__)

INLINE_CHARS = 500
"""Texts up to this long, without a code fence, render in the caller's thread. Measured
(2 cores): typical prose of 500 characters renders in about 4 ms here and as fast through
a worker (round trip included), shorter texts faster here (0.4 ms against 0.6 ms at 100
characters); the slowest 500 characters found (`![`, `[`, `http://a.` repeated) take
about 20 ms, 2,000 of them over 100 ms, so past this length a text goes to a worker."""

_markdown = (
    MarkdownIt(
        "commonmark",
        {"html": False, "linkify": True, "breaks": True, "highlight": highlight_code},
    )
    .enable(["table", "strikethrough", "linkify"])
    .use(math_plugin)
)
assert _markdown.linkify is not None  # the "linkify" option above makes it
_markdown.linkify.set({"fuzzy_link": False, "fuzzy_email": False})
"""Only URLs with a scheme (or `www.`) become links: `file.py` in prose stays text."""

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "span", "div", *MATHML_TAGS,
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "th": {"align"},
    "td": {"align"},
    **{tag: set(MATHML_ATTRIBUTES) for tag in MATHML_TAGS},
}
URL_SCHEMES = {"http", "https", "mailto"}

_cleaner = nh3.Cleaner(
    tags=ALLOWED_TAGS,
    attributes=ALLOWED_ATTRIBUTES,
    url_schemes=URL_SCHEMES,
    link_rel="noopener noreferrer nofollow",
    set_tag_attribute_values={"a": {"target": "_blank"}},
    allowed_classes={
        "code": set(LANGUAGE_CLASSES) | {"math-source"},
        "span": set(TOKEN_CLASSES) | {"math", "inline", "display"},
        "div": {"math", "inline", "block"},
    },
)
"""Built once: handing the rules to nh3 costs more than cleaning a typical answer."""

_CODE_BLOCK = re.compile(r'<pre><code(?: class="([^"]*)")?>(.*?)</code></pre>', re.S)


def _with_copy_control(match: re.Match[str]) -> str:
    classes = match.group(1) or ""
    language = classes.removeprefix("language-") if classes.startswith("language-") else ""
    label = f'<span class="code-language">{language}</span>' if language else "<span></span>"
    code_class = f' class="language-{language}"' if language else ""
    return (
        '<div class="code-block"><div class="code-head">'
        f'{label}<button type="button" class="copy-code" data-action="copy-code" '
        'aria-label="Copy code">Copy</button>'
        f"</div><pre><code{code_class}>{match.group(2)}</code></pre></div>"
    )


_BARE_PRE = re.compile(r'<pre><code(?: class="language-([^"]*)")?>')
_BARE_TABLE = re.compile(r'(?<!aria-label="Table">)<table>(.*?)</table>', re.S)


def _focusable_pre(match: re.Match[str]) -> str:
    language = match.group(1)
    code_class = f' class="language-{language}"' if language else ""
    name = f"{language} code" if language else "Code"
    return f'<pre tabindex="0" role="group" aria-label="{name}"><code{code_class}>'


def _sub_closed(pattern: re.Pattern[str], replace: Any, html: str, closer: str) -> str:
    """`pattern.sub(replace, html)` for a pattern that ends with `closer` after a lazy
    `(.*?)`: only the text up to the last `closer` is searched. A search past it could
    never match, and each opener there would read the rest of the text to find that out:
    the square of the text's length for a text of openers. Before it, each try stops at
    the next closer, which a match then consumes."""
    end = html.rfind(closer)
    if end < 0:
        return html
    end += len(closer)
    return pattern.sub(replace, html[:end]) + html[end:]


def scrollable_parts_focusable(html: str) -> str:
    """Code blocks and tables scroll sideways rather than squeeze or break their text; a
    keyboard reaches what scrolls only if it can take the focus, so each is a named,
    focusable group. Idempotent, so answers stored before this rule get it when shown.
    Linear (it runs on the loop each time a page shows a stored answer)."""
    html = _BARE_PRE.sub(_focusable_pre, html)
    return _sub_closed(
        _BARE_TABLE,
        r'<div class="table-scroll" tabindex="0" role="group" aria-label="Table">'
        r"<table>\1</table></div>",
        html,
        "</table>",
    )


_CODE_COPY = 'aria-label="Copy code"'


def name_code_copies(html: str, whose: str, before: int = 0) -> str:
    """Each code block's copy control named after the message it is in ("Copy code of
    answer 3", then "Copy code 2 of answer 3", ...): a screen reader's list of buttons
    tells them apart. A name depends only on the block's place (`before`: the blocks
    ahead of `html` in the message), so an answer streamed block by block names each
    once. The rendered HTML is shared by every page, so names are given when shown."""
    numbers = iter(range(before + 1, before + 1 + html.count(_CODE_COPY)))

    def name(_: re.Match[str]) -> str:
        number = next(numbers)
        return f'aria-label="Copy code{f" {number}" if number > 1 else ""} of {whose}"'

    return re.sub(_CODE_COPY, name, html) if _CODE_COPY in html else html


def code_blocks_in(html: str) -> int:
    """How many code blocks (each with its copy control) `html` holds."""
    return html.count('class="copy-code"')


def render_here(text: str) -> Markup:
    """Sanitized HTML for `text`, made in this thread: the rules themselves, run by
    `render_markdown` for short texts and by the render workers for the rest."""
    clean = _cleaner.clean(_markdown.render(text))
    with_copy = _sub_closed(_CODE_BLOCK, _with_copy_control, clean, "</code></pre>")
    return Markup(scrollable_parts_focusable(with_copy))


def renders_inline(text: str, *, colour: bool = True) -> bool:
    """Whether `text` is short enough to render where it is asked for: nothing to colour
    (a fence needs a worker's time limit) and at most `INLINE_CHARS` characters."""
    fenced = colour and ("```" in text or "~~~" in text)
    return len(text) <= INLINE_CHARS and not fenced


def plain_html(text: str) -> Markup:
    """The text as escaped paragraphs: what a text that could not be rendered shows (on
    the loop, for a text a worker could not render in time: every step runs at C speed,
    never a Python step per paragraph or line)."""
    parts = filter(str.strip, _BLANK_LINE.split(str(escape(text))))
    paragraphs = "</p><p>".join(parts).replace("\n", "<br>\n")
    return Markup(f"<p>{paragraphs}</p>" if paragraphs else "")


_BLANK_LINE = re.compile(r"\n(?:[ \t]*\n)+")


def _from_worker(html: str | None, text: str) -> Markup:
    return Markup(html) if html is not None else plain_html(text)


def _render_inline(text: str) -> Markup:
    """`render_here`, or the text plain when it cannot be rendered (nh3 refuses a lone
    surrogate, for one), as a worker would show it."""
    try:
        return render_here(text)
    except Exception:  # the libraries' failures on odd input; never a failed page
        log.exception("rendering failed; the text is shown plain")
        return plain_html(text)


def render_markdown(text: str) -> Markup:
    """Sanitized HTML for `text`; the one place model output becomes markup. A long text
    waits here for a render worker (up to its deadline): on the event loop, use
    `render_markdown_async`, or `prerendered` for what a template will show."""
    wanted = _wanted.get()
    if wanted is not None:  # `prerendered` asks what the views will need
        wanted.append(text)
        return Markup()
    memo = _memo.get()
    if memo is not None:
        found = memo.get(text)
        if found is not None:
            return found
    if renders_inline(text):
        return _render_inline(text)
    return _from_worker(render_workers.render(text), text)


async def render_markdown_async(text: str, *, colour: bool = True) -> Markup:
    """`render_markdown` for the event loop: a short text renders at once (and the loop
    then runs others before this caller goes on, so a run of them cannot add up to a
    stall); a long one renders in a worker while the loop serves everyone else. Without
    `colour` its code blocks are plain: an answer's block still being written, which
    grows by what is appended (coloured, a longer block may tokenize differently)."""
    if renders_inline(text, colour=colour):
        html = _render_inline(text)
        await asyncio.sleep(0)
        return html
    return _from_worker(await render_workers.render_async(text, colour=colour), text)


class Shown(Protocol):
    """What a template shows: an object whose `html` may render markdown."""

    @property
    def html(self) -> Markup: ...


ShownT = TypeVar("ShownT", bound=Shown)

_wanted: ContextVar[list[str] | None] = ContextVar("markdown_wanted", default=None)
_memo: ContextVar[dict[str, Markup] | None] = ContextVar("markdown_memo", default=None)


async def prerendered(views: list[ShownT]) -> list[ShownT]:
    """`views`, with the markdown their `html` renders worked out now, off the loop where
    it is long: the template that shows them (rendered on the loop, synchronously, later
    in this request or stream step) then finds it made. Each call replaces the previous
    call's results, so a long stream keeps only its latest update's."""
    wanted: list[str] = []
    token = _wanted.set(wanted)
    try:
        for view in views:
            view.html  # noqa: B018 (collects the texts it would render)
    finally:
        _wanted.reset(token)
    memo: dict[str, Markup] = {}
    for text in wanted:
        if text not in memo:
            memo[text] = await render_markdown_async(text)
    _memo.set(memo)
    return views


async def prerendered_view(view: ShownT) -> ShownT:
    """`prerendered` for one view."""
    return (await prerendered([view]))[0]
