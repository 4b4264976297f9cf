"""Model output as HTML that cannot act: markdown without raw HTML, then sanitized.

Model text is untrusted. markdown-it renders it with raw HTML off (code coloured by
Pygments, math turned into MathML, bare URLs linked), and nh3 (ammonia) keeps only a
small set of tags, attributes and classes, so no script, no `on*` handler and no
`hx-*` attribute survives (htmx would act on those), and links keep only safe schemes
and open in a new tab. The copy control of each code block is added after sanitizing:
it is ours, not the model's, and model text can never produce a `<pre>` of its own.
"""

from __future__ import annotations

import re

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

from webapp.web.highlight import LANGUAGE_CLASSES, TOKEN_CLASSES, highlight_code
from webapp.web.mathml import MATHML_ATTRIBUTES, MATHML_TAGS, math_plugin

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
        f'{label}<button type="button" class="copy-code" data-action="copy-code">Copy</button>'
        f"</div><pre><code{code_class}>{match.group(2)}</code></pre></div>"
    )


def render_markdown(text: str) -> Markup:
    """Sanitized HTML for `text`; the one place model output becomes markup."""
    clean = _cleaner.clean(_markdown.render(text))
    return Markup(_CODE_BLOCK.sub(_with_copy_control, clean))
