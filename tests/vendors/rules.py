"""What the fakes hold of the two vendors: their models and limits, the keys they take,
and the rules both count and cache by."""

from __future__ import annotations

ANTHROPIC_MODELS: dict[str, tuple[int, int]] = {
    "claude-small": (4096, 1024),
    "claude-large": (200_000, 64_000),
}
"""Model id -> (max_input_tokens, max_tokens)."""
ANTHROPIC_VISION = frozenset({"claude-large"})
"""Claude models that read images; the others refuse a request holding one (400)."""
IMAGE_TOKENS = 1600
"""What an image costs a model that reads it (Anthropic's for a 1,092 x 1,092 image)."""
GEMINI_MODELS: dict[str, tuple[int, int]] = {
    "gemini-small": (4096, 1024),
    "gemini-large": (1_048_576, 65_536),
    "gemini-embedding": (2048, 1),
}
"""Model id -> (inputTokenLimit, outputTokenLimit)."""
EMBEDDING_MODELS = frozenset({"gemini-embedding"})
"""Gemini models that embed (`:embedContent`, `:batchEmbedContents`) and do nothing else."""
EMBEDDING_SIZE = 8
"""Values in a vector unless the request's `outputDimensionality` says fewer."""

ANTHROPIC_KEY = "sk-ant-test-0123456789"
GEMINI_KEY = "AIza-test-0123456789"

REQUEST_BASE = 3
"""Tokens every prompt costs beyond its messages (the reply's priming)."""
MESSAGE_FRAME = 4
"""Tokens each message (each `contents` entry, the system prompt) costs beyond its parts."""
BLOCK_FRAME = 3
"""Tokens a tool call or tool result block costs beyond its name, input and content."""
MAX_BREAKPOINTS = 4
"""Anthropic takes at most this many `cache_control` blocks a request."""
LOOKBACK = 20
"""Blocks before a breakpoint that Anthropic looks back over for a cached prefix."""
MIN_CACHEABLE = 1024
"""The shortest prefix either vendor caches (Anthropic's least; Gemini's implicit
caching starts at 1,024 tokens on Flash)."""

GENERATION_METHODS = ("generateContent", "streamGenerateContent", "countTokens")
EMBEDDING_METHODS = ("embedContent", "batchEmbedContents")
