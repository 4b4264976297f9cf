"""Model output as HTML that cannot act: markdown without raw HTML, then sanitized.

Model text is untrusted. markdown-it renders it with raw HTML off, and nh3
(ammonia) keeps only a small set of tags and attributes, so no script, no
`on*` handler and no `hx-*` attribute survives (htmx would act on those), and
links keep only safe schemes.
"""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True}).enable(
    ["table", "strikethrough"]
)

ALLOWED_TAGS = {
    "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote",
    "ul", "ol", "li", "a", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tr", "th", "td", "span",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "ol": {"start"},
    "th": {"align"},
    "td": {"align"},
}
URL_SCHEMES = {"http", "https", "mailto"}


_LANGUAGES = (
    "python", "javascript", "typescript", "json", "bash", "sh", "shell", "html", "css", "sql",
    "go", "rust", "java", "c", "cpp", "toml", "yaml", "text", "diff",
)  # fmt: skip
_cleaner = nh3.Cleaner(
    tags=ALLOWED_TAGS,
    attributes=ALLOWED_ATTRIBUTES,
    url_schemes=URL_SCHEMES,
    link_rel="noopener noreferrer nofollow",
    allowed_classes={"code": {f"language-{name}" for name in _LANGUAGES}},
)
"""Built once: handing the rules to nh3 costs more than cleaning a typical answer."""


def render_markdown(text: str) -> Markup:
    return Markup(_cleaner.clean(_markdown.render(text)))
