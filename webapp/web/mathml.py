"""LaTeX in model output as MathML, made on the server: browsers draw MathML natively,
so neither a CDN nor a client library is needed.

Model text writes math as `$...$`, `$$...$$`, `\\(...\\)` or `\\[...\\]`. The math is taken
out of the text before markdown's backslash escapes run (that is what turned `\\,` into
`,`), converted by latex2mathml, and sanitized with the rest of the answer afterwards.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from latex2mathml.converter import convert
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.rules_inline import StateInline
from mdit_py_plugins.dollarmath import dollarmath_plugin

MATHML_TAGS = frozenset(
    {
        "math", "semantics", "annotation", "mrow", "mi", "mo", "mn", "ms", "mtext", "mspace",
        "msup", "msub", "msubsup", "mfrac", "msqrt", "mroot", "mover", "munder",
        "munderover", "mtable", "mtr", "mtd", "mstyle", "mpadded", "mphantom", "menclose",
        "merror", "mmultiscripts", "mprescripts", "none",
    }
)  # fmt: skip
MATHML_ATTRIBUTES = frozenset(
    {
        "display", "mathvariant", "stretchy", "fence", "separator", "lspace", "rspace",
        "accent", "accentunder", "columnalign", "columnspacing", "rowspacing", "width",
        "height", "depth", "linethickness", "minsize", "maxsize", "movablelimits",
        "notation", "displaystyle", "scriptlevel", "symmetric", "largeop", "form",
        "columnlines", "rowlines", "frame", "framespacing", "equalrows", "equalcolumns",
    }
)  # fmt: skip
"""What latex2mathml writes and the sanitizer lets through (no href, no event handler)."""

MAX_LATEX = 5_000
"""Characters of one formula worth converting; longer ones are shown as their source."""


def latex_to_mathml(latex: str, options: dict[str, Any]) -> str:
    """The formula as MathML, or its source in `<code>` when it does not parse, so a
    broken formula is still readable and never fails the answer."""
    display = "block" if options.get("display_mode") else "inline"
    source = latex.strip()
    if source and len(source) <= MAX_LATEX:
        try:
            return convert(source, display=display)
        except Exception:  # latex2mathml raises many kinds on malformed input
            pass
    return f'<code class="math-source">{escapeHtml(latex)}</code>'


_CLOSERS_KEY = "webapp.math_closers"
"""Where a render's env keeps, per inline source and closer, where that closer occurs."""


def _next_closer(state: StateInline, closer: str, start: int) -> int:
    """`state.src.find(closer, start)`, in O(log n) once per source: the positions of each
    closer are listed once (one linear pass), then looked up by bisection. Searching the
    rest of the text at every opener made `\\(` repeated 100,000 times quadratic (seconds
    of a blocked server); `\\)` and `\\]` cannot overlap themselves, so the list holds
    every position `find` could return."""
    cache: dict[tuple[str, str], list[int]] = state.env.setdefault(_CLOSERS_KEY, {})
    key = (closer, state.src)  # a str keeps its hash: looking a source up again is O(1)
    positions = cache.get(key)
    if positions is None:
        positions = cache[key] = _positions(state.src, closer)
    index = bisect_left(positions, start)
    return positions[index] if index < len(positions) else -1


def _positions(src: str, needle: str) -> list[int]:
    found: list[int] = []
    at = src.find(needle)
    while at >= 0:
        found.append(at)
        at = src.find(needle, at + len(needle))
    return found


def _bracket_math(state: StateInline, silent: bool) -> bool:
    r"""`\(...\)` inline and `\[...\]` displayed, read before markdown's escapes are."""
    start = state.pos
    opener = state.src[start : start + 2]
    if opener not in ("\\(", "\\["):
        return False
    closer = "\\)" if opener == "\\(" else "\\]"
    end = _next_closer(state, closer, start + 2)
    if end < 0 or end == start + 2:
        return False
    if not silent:
        token = state.push("math_inline" if opener == "\\(" else "math_inline_double", "math", 0)
        token.content = state.src[start + 2 : end]
        token.markup = opener
    state.pos = end + 2
    return True


def math_plugin(md: MarkdownIt) -> None:
    """Teach `md` the four ways models write math, each rendered to MathML."""
    # `$5 and $10` stays text: an opening `$` must touch its formula, and a closing one
    # must not be followed by a digit (pandoc's rule).
    md.use(
        dollarmath_plugin,
        allow_space=False,
        allow_digits=False,
        allow_labels=False,
        double_inline=True,
        renderer=latex_to_mathml,
    )
    md.inline.ruler.before("escape", "math_brackets", _bracket_math)
    # Displayed math inside a paragraph stays phrasing content (a `div` would split the
    # paragraph in two and leave an empty one behind).
    md.add_render_rule("math_inline_double", _render_displayed_inline)


def _render_displayed_inline(self: Any, tokens: list[Any], idx: int, options: Any, env: Any) -> str:
    mathml = latex_to_mathml(tokens[idx].content, {"display_mode": True})
    return f'<span class="math display">{mathml}</span>'
