"""Code blocks coloured on the server with Pygments, so no client library is needed.

Pygments emits `<span class="k">` and the like; the sanitizer keeps exactly those
classes (`TOKEN_CLASSES`) and the stylesheet colours them (static/app.css, "code").

Colouring cannot blow up. Many Pygments lexers have regexes that backtrack badly on some
input (`systemd` takes seconds on `x`, 1,400 spaces, `x`; `xpp` on 800 lines of `x`;
`cpp` and `csharp` among the common ones), and a single regex match holds the GIL the
whole time, so neither a thread nor a size limit per lexer makes it safe. Instead:

- a block is coloured only inside a render worker (webapp.web.render_workers), a process
  of its own: there `time_limited()` has armed a SIGALRM timer, and the regex engine checks
  for signals as it backtracks, so a block that runs past `BLOCK_SECONDS` is interrupted
  and shown plain, and one render spends at most `RENDER_SECONDS` colouring in all (the
  rest of its blocks are plain). Anywhere else (no timer to stop it), code is shown plain;
  webapp.web.markdown sends every text with a code fence to a worker.
- lexers known to blow up on ordinary-looking input (`SLOW_LEXERS`) are never tried, so
  they do not cost a worker its budget each time;
- a block over `MAX_HIGHLIGHTED` characters is shown plain.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from types import FrameType

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

MAX_HIGHLIGHTED = 100_000
"""Characters of one block worth colouring; past that it is shown plain (a pasted log of
megabytes gains nothing from colour, and a lexer's time grows with it)."""

BLOCK_SECONDS = 0.5
"""Time one block may take to colour (typical code colours at about 1 MB/s)."""

RENDER_SECONDS = 2.0
"""Time all blocks of one render may take together; later blocks are shown plain."""

SLOW_LEXERS = frozenset(
    {
        "systemd",  # `x`, 1,400 spaces, `x`: 10 s
        "lilypond",  # 2,000 letters: past 0.5 s
        "xpp",  # 800 lines of `x`: 1.7 s; 2,800: 31 s
        "autohotkey",  # 800 lines of one space: past 0.5 s
        "autoit",  # likewise
        "easytrieve",  # a line of 1,400 tabs: past 0.5 s
        "fan",  # 2,000 letters: past 0.5 s
    }
)
"""Lexers (by their first Pygments alias, so every alias is caught) seen to take far longer
than their input warrants on short, ordinary-looking input (every lexer was tried on 26
runs of 800 to 2,800 of one character or a few): shown plain without trying. Only a
shortcut: the time limit is what makes colouring safe, for these and for every lexer not
listed (`cpp` and `csharp` overran it in the same trial and are kept, as ordinary code
colours well within it)."""

_formatter = HtmlFormatter(nowrap=True)


class _Overrun(BaseException):
    """Raised by the timer's signal inside Pygments (BaseException: no lexer's `except
    Exception` can swallow it)."""


class _Limits:
    armed = False
    """Set by `time_limited()` in a render worker's main thread; never in the server."""
    left = RENDER_SECONDS
    """Colouring time this render has left."""
    running = False
    """A block is being coloured: only then does the timer's signal interrupt."""


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    if _Limits.running:
        _Limits.running = False
        raise _Overrun


def time_limited() -> None:
    """Arm the time limits for this process (a render worker's main thread, at its start):
    from now on code blocks are coloured, each within its budget."""
    signal.signal(signal.SIGALRM, _on_alarm)
    _Limits.armed = True


def new_render(*, colour: bool = True) -> None:
    """A new text is being rendered: it gets the whole colouring budget again (none, when
    its code is to be shown plain)."""
    _Limits.left = RENDER_SECONDS if colour else 0.0


@contextmanager
def _interrupted_after(seconds: float) -> Iterator[None]:
    _Limits.running = True
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        _Limits.running = False
        signal.setitimer(signal.ITIMER_REAL, 0)


@lru_cache(maxsize=256)
def _lexer(language: str) -> Lexer | None:
    try:
        lexer = get_lexer_by_name(language, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return None
    return None if set(lexer.aliases[:1]) & SLOW_LEXERS else lexer


def highlight_code(code: str, language: str, _attrs: str = "") -> str:
    """markdown-it's `highlight` hook: the block's inner HTML, or "" to let markdown-it
    escape it plainly (no language named, an unknown or slow one, too long, out of time,
    or not in a render worker)."""
    if not _Limits.armed or not language.strip() or len(code) > MAX_HIGHLIGHTED:
        return ""
    budget = min(BLOCK_SECONDS, _Limits.left)
    if budget < 0.01:
        return ""
    lexer = _lexer(language.strip().lower())
    if lexer is None:
        return ""
    started = time.monotonic()
    try:
        with _interrupted_after(budget):
            return highlight(code, lexer, _formatter)
    except _Overrun:
        return ""
    finally:
        _Limits.left -= time.monotonic() - started
