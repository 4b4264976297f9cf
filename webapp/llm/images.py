"""What a picture costs a model, by its provider's published rule, and how large it is
sent. Always erring high: a picture is counted at the size the provider reads it, each
partial tile as a whole one.

- OpenAI (high detail): fitted within 2048 x 2048, then its shortest side brought to
  768; 85 tokens plus 170 for each 512-pixel tile.
- Anthropic: its long edge brought to 1568 and its area to about 1,600 tokens' worth;
  width x height / 750.
- Gemini: 258 tokens for a picture of at most 384 pixels a side, else 258 for each
  768-pixel tile.
- An OpenAI-compatible server whose rule is not known: `[[models]] image_tokens`, when
  set, a fixed figure per picture.
"""

from __future__ import annotations

import math

SENT_LONG_EDGE = {"openai": 2048, "anthropic": 1568, "gemini": 3072, "demo": 2048}
"""The long edge a picture is scaled down to before it is sent, by provider kind: no
provider reads more, so more would be bytes for nothing."""
ANTHROPIC_MAX_TOKENS = 1600
GEMINI_SMALL = 384
GEMINI_TILE = 768
GEMINI_TILE_TOKENS = 258


def scaled_within(width: int, height: int, long_edge: int) -> tuple[int, int]:
    """The size with its long edge at most `long_edge`, aspect kept (never enlarged)."""
    longest = max(width, height)
    if longest <= long_edge:
        return width, height
    factor = long_edge / longest
    return max(1, math.floor(width * factor)), max(1, math.floor(height * factor))


def sent_size(kind: str, width: int, height: int) -> tuple[int, int]:
    return scaled_within(width, height, SENT_LONG_EDGE.get(kind, 2048))


def openai_tokens(width: int, height: int) -> int:
    width, height = scaled_within(width, height, 2048)
    shortest = min(width, height)
    if shortest > 768:
        factor = 768 / shortest
        width, height = math.ceil(width * factor), math.ceil(height * factor)
    return 85 + 170 * math.ceil(width / 512) * math.ceil(height / 512)


def anthropic_tokens(width: int, height: int) -> int:
    width, height = scaled_within(width, height, 1568)
    tokens = math.ceil(width * height / 750)
    return min(tokens, ANTHROPIC_MAX_TOKENS)


def gemini_tokens(width: int, height: int) -> int:
    if width <= GEMINI_SMALL and height <= GEMINI_SMALL:
        return GEMINI_TILE_TOKENS
    tiles = math.ceil(width / GEMINI_TILE) * math.ceil(height / GEMINI_TILE)
    return GEMINI_TILE_TOKENS * tiles


def image_tokens(kind: str, width: int, height: int, fixed: int | None = None) -> int:
    """A picture's tokens for a model of provider `kind` (`fixed`: the model's own
    `image_tokens`, which wins), at the size it is sent."""
    if fixed is not None:
        return fixed
    width, height = sent_size(kind, width, height)
    if kind == "anthropic":
        return anthropic_tokens(width, height)
    if kind == "gemini":
        return gemini_tokens(width, height)
    return openai_tokens(width, height)
