"""Where a growing markdown text's finished top-level blocks end.

A streamed answer is shown while it grows. Rendering all of it at every update costs the
square of its length, and so does sending it; but once a later block has begun, the
blocks before it can no longer change (markdown has no construct that reaches back over
a blank line into a closed block, except link reference definitions, which the final
comparison with the stored rendering catches). This finds that point by reading lines,
without parsing: a blank line outside any fence (code or `$$` math), followed by a whole
line that starts at the margin and does not start a list item (a list item after a blank
line may continue the list above it, and make it loose). Being cautious only keeps more
text in the open block, which is re-rendered and compared, never shown wrong.
"""

from __future__ import annotations

import asyncio
import re

THREAD_CHARS = 50_000
"""Past this many characters to read, `finished_end_async` reads them in a thread: it reads
a line at a time (a megabyte of short lines is a fifth of a second), which the event loop
must not wait for."""
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*$")
_MATH_FENCE = re.compile(r" {0,3}\$\$")
_LIST_ITEM = re.compile(r"(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")


def finished_end(text: str, start: int = 0) -> int:
    """The end of the finished blocks of `text[start:]` (`start` itself when none is),
    where `start` is a block boundary: 0, or a value this returned before."""
    end = start
    fence = ""
    in_math = False
    after_blank = False
    position = start
    while (newline := text.find("\n", position)) >= 0:
        line = text[position:newline]
        if fence:
            close = _FENCE_CLOSE.match(line)
            if close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence):
                fence = ""
            after_blank = False
        elif in_math:
            in_math = not line.rstrip().endswith("$$")
            after_blank = False
        elif not line.strip():
            after_blank = True
        else:
            if after_blank and not line[0].isspace() and not _LIST_ITEM.match(line):
                end = position
            after_blank = False
            opening = _FENCE_OPEN.match(line)
            if opening and not (opening.group(1)[0] == "`" and "`" in line[opening.end() :]):
                fence = opening.group(1)
            elif _MATH_FENCE.match(line):
                rest = line.strip()[2:]
                in_math = not rest.rstrip().endswith("$$")
        position = newline + 1
    return end


async def finished_end_async(text: str, start: int = 0) -> int:
    """`finished_end` for the event loop: a long stretch is read in a thread."""
    if len(text) - start <= THREAD_CHARS:
        return finished_end(text, start)
    return await asyncio.to_thread(finished_end, text, start)
