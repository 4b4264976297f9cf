"""Code blocks coloured on the server with Pygments, so no client library is needed.

Pygments emits `<span class="k">` and the like; the sanitizer keeps exactly those
classes (`TOKEN_CLASSES`) and the stylesheet colours them (static/app.css, "code").
"""

from __future__ import annotations

from functools import lru_cache

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import get_all_lexers, get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

TOKEN_CLASSES = frozenset(name for name in STANDARD_TYPES.values() if name)
"""Every class Pygments can put on a span."""

LANGUAGE_CLASSES = frozenset(
    f"language-{alias}" for _, aliases, _, _ in get_all_lexers() for alias in aliases
)
"""`language-<alias>` for every language Pygments knows: the class a fence keeps."""

MAX_HIGHLIGHTED = 200_000
"""Characters of one block worth colouring; past that it is shown plain (lexing is linear,
but a pasted log of megabytes gains nothing from colour)."""

_formatter = HtmlFormatter(nowrap=True)


@lru_cache(maxsize=256)
def _lexer(language: str) -> Lexer | None:
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None


def highlight_code(code: str, language: str, _attrs: str = "") -> str:
    """markdown-it's `highlight` hook: the block's inner HTML, or "" to let markdown-it
    escape it plainly (no language named, an unknown one, or too long)."""
    lexer = _lexer(language.strip().lower()) if language.strip() else None
    if lexer is None or len(code) > MAX_HIGHLIGHTED:
        return ""
    return highlight(code, lexer, _formatter)
