"""Token estimates that err high, for every script and kind of text.

Why estimate at all: the chat bounds every prompt by the model's context window
(docs/design.md section 3), but it talks to many providers whose tokenizers it does
not ship. An estimate that is too low sends a prompt the provider rejects; one
that is too high only drops a little more history. So the estimate must never
undercount, and should stay close where most text is: English prose and code.

Why not bytes / 3.5 (the seed): it undercounts JSON, code, emoji and Japanese
by up to 2.5x. Why not a per-character weight: random letters cost ~0.55
tokens each, English letters ~0.2, so any flat weight is either unsafe or 2.5x
high on English.

How: the text is encoded to UTF-8 once and priced with a few C-speed passes
(``bytes.translate``, then ``bytes.count`` or a checksum that sums the bytes),
never a Python loop per character:

* every byte has a cost. Letters that are frequent in English cost nothing
  beyond their word, because BPE keeps common words whole; rare letters (j, q,
  x, z, ...) and symbols cost more, as they mark identifiers, foreign words and
  random strings, which BPE splits. A non-ASCII character costs its lead byte
  (which names its script block) plus one price per continuation byte;
* shape counts: words, long words, camelCase humps, consonant clusters,
  punctuation pairs, whitespace runs, digit groups;
* a few script corrections: lowercase Russian letters, kana, CJK and fullwidth
  punctuation, and curly quotes and dashes cost less than the rest of their
  block; a space before a non-ASCII character, or a letter after a combining
  mark, costs more.

The weights were fitted by linear programming against OpenAI's cl100k_base:
every sample of ``tests/corpus/estimator``, a larger set of English prose and
code, their sentences recombined, tens of thousands of random strings per
script (what the property tests draw), every character block repeated, and
Hypothesis' own "naughty strings" must be counted at least as high as the real
tokenizer (whole texts with 8% to spare), while English prose is overcounted
as little as possible; then every weight was rounded up. The result is never
more than the UTF-8 byte count, which a byte-level BPE cannot exceed.

What it costs (``python -m tests.test_estimator`` prints the table): English
prose 1.2-1.3x, German 1.3x, code and JSON 1.3-1.6x, short chat lines up to 2x
(a fixed 4 tokens per text, capped at the byte count). Scripts with large
alphabets are priced near their worst case, because cl100k splits each rare
character into bytes: Russian and Japanese about 2x, Chinese, Arabic, Hindi and
Korean about 2.5x. Tokenizers with small vocabularies (Llama 2, Mistral) fare
worse than cl100k on those scripts, so this is also their safety margin.
Per-model calibration (a factor >= 1) is applied elsewhere, on top.
"""

import asyncio
import json
import math
import string
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MESSAGE_OVERHEAD = 4
"""Tokens a chat message costs beyond its content (role and separators)."""

REPLY_PRIMING = 3
"""Tokens that prime the assistant's reply, once per request."""

TOOL_OVERHEAD = 8
"""Tokens per tool definition beyond its JSON (wrapping and separators)."""

TOOL_CALL_OVERHEAD = 8
"""Tokens per tool call in a message beyond its id, name and arguments."""

IMAGE_PART_TOKENS = 1600
"""Allowance for one image part: providers price images by size, not bytes."""

_TEXT_COST = 4.0
"""Fixed cost of any non-empty text: covers short random strings cheaply."""

_SAFETY = 1.01
"""The fit leaves random text no slack; 1% more covers what 100,000 more random
samples (a sweep of the property tests) found: shortfalls of 1-2 tokens."""

_SCALE = 192
"""Byte costs are stored as integers in units of 1/192 token (all are below 1.33)."""

# Cost of ASCII characters in tokens, grouped by cost. "\x00" stands for every
# other control character.
_ASCII_COST: dict[str, float] = {
    "dnrst": 0.0,
    "a": 0.052,
    "b": 0.07,
    "c": 0.072,
    " ": 0.079,
    "i": 0.091,
    "h": 0.111,
    "k": 0.127,
    "e": 0.138,
    "\n": 0.148,
    "=": 0.201,
    "m": 0.202,
    "g": 0.214,
    "y": 0.228,
    "o": 0.236,
    "l": 0.256,
    ":": 0.266,
    "w": 0.281,
    ",": 0.333,
    '"': 0.334,
    ";": 0.354,
    "'": 0.364,
    "[": 0.374,
    "u": 0.404,
    "p": 0.424,
    "v": 0.431,
    ")": 0.433,
    "/": 0.442,
    string.digits: 0.469,
    "f": 0.48,
    "?": 0.542,
    "\\": 0.544,
    ">{": 0.548,
    "-": 0.582,
    "!": 0.602,
    "_": 0.621,
    "(": 0.627,
    string.ascii_uppercase: 0.652,
    "%": 0.668,
    "*": 0.695,
    "}": 0.697,
    ".": 0.701,
    "$": 0.747,
    "\t": 0.779,
    "x": 0.789,
    "|": 0.876,
    "]": 0.889,
    "&": 0.907,
    "\x00": 0.974,
    "jqz#+<@^`~\r": 1.0,
}

_CONTINUATION_COST = 1.285
"""Cost of each UTF-8 continuation byte (0x80-0xBF) of a non-ASCII character."""

# Cost of the lead byte of a non-ASCII character, by lead byte; the comment
# names the code points it starts. 0.715 makes a two-byte character cost its two
# bytes, the most it can: rare blocks are priced at that ceiling.
_LEAD_COST: dict[int, float] = {
    0xC2: 0.715, 0xC3: 0.55,  # U+0080-00FF Latin-1: symbols, accented letters
    0xC4: 0.715, 0xC5: 0.715,  # U+0100-017F Latin Extended-A
    0xC6: 0.715, 0xC7: 0.716, 0xC8: 0.715, 0xC9: 0.716,  # Latin Extended-B, IPA
    0xCA: 0.716, 0xCB: 0.716,  # U+0280-02FF IPA, spacing modifiers
    0xCC: 0.715, 0xCD: 0.715,  # U+0300-037F combining marks
    0xCE: 0.715, 0xCF: 0.715,  # U+0380-03FF Greek
    0xD0: 0.636, 0xD1: 0.715, 0xD2: 0.715, 0xD3: 0.715,  # U+0400-04FF Cyrillic
    0xD4: 0.715, 0xD5: 0.715,  # U+0500-057F Cyrillic Supplement, Armenian
    0xD6: 0.715, 0xD7: 0.715,  # U+0580-05FF Armenian, Hebrew
    0xD8: 0.715, 0xD9: 0.715, 0xDA: 0.715, 0xDB: 0.715,  # U+0600-06FF Arabic
    0xDC: 0.715, 0xDD: 0.715, 0xDE: 0.715, 0xDF: 0.715,  # Syriac, Thaana, NKo
    0xE0: 0.299,  # U+0800-0FFF Indic scripts, Thai, Lao, Tibetan
    0xE1: 0.432,  # U+1000-1FFF Georgian, Hangul Jamo, Vietnamese, ...
    0xE2: 0.422,  # U+2000-2FFF punctuation, symbols, arrows, dingbats
    0xE3: 0.32,  # U+3000-3FFF CJK punctuation, kana, CJK Extension A
    0xE4: 0.299, 0xE5: 0.299, 0xE6: 0.382, 0xE7: 0.382, 0xE8: 0.422, 0xE9: 0.422,  # CJK
    0xEA: 0.352, 0xEB: 0.299, 0xEC: 0.422, 0xED: 0.422,  # Yi, Hangul syllables
    0xEE: 0.299, 0xEF: 0.422,  # U+E000-FFFF private use, fullwidth forms
    0xF0: 0.138, 0xF1: 0.0, 0xF2: 0.148, 0xF3: 0.121, 0xF4: 0.138,  # emoji, U+10000+
}  # fmt: skip

# Shape counts and their costs in tokens.
_WORD = 0.554  # each run of ASCII letters
_LONG_WORD_12 = 1.9  # per 12 lowercase letters in a row
_LONG_WORD_16 = 6.044  # per 16 lowercase letters in a row (hashes, run-ons)
_CASE_HUMP = 1.192  # lowercase followed by uppercase, as in camelCase
_CONSONANTS_3 = 0.909  # per 3 consonants in a row
_CONSONANTS_4 = 1.424  # per 4 consonants in a row
_PUNCT_PAIR = 0.253  # per 2 ASCII punctuation characters in a row
_SPACE_RUN = 1.354  # each run of 2+ whitespace characters (indentation, alignment)
_DIGIT_RUN = 1.202  # each run of digits
_SPACE_BEFORE_NON_ASCII = 0.962  # BPE often cannot merge the space into it
_LETTER_AFTER_MARK = 0.505  # zalgo and decomposed accents split words
_RUSSIAN_LOWERCASE = -1.0  # а-я: the common half of the Cyrillic block
_COMMON_PUNCTUATION = -2.156  # ’ ‘ “ ” — – … •: one token, often merged
_KANA = -0.967
_CJK_PUNCTUATION = -1.261  # U+3000-303F 、 。 「 」
_FULLWIDTH = -1.04  # U+FF00-FF7F ， ！ ？ （ ）


def _table(mapping: Iterable[tuple[bytes, str]], default: bytes = b" ") -> bytes:
    """A ``bytes.translate`` table that maps the given bytes to one symbol each."""
    table = bytearray(default * 256)
    for chars, symbol in mapping:
        for byte in chars:
            table[byte] = ord(symbol)
    return bytes(table)


def _byte_units() -> bytes:
    """Cost of every byte value, in units of 1/192 token, rounded up."""
    costs = [0.0] * 256
    for chars, cost in _ASCII_COST.items():
        for char in chars:
            costs[ord(char)] = cost
    for byte in [*range(0x00, 0x09), *range(0x0B, 0x0D), *range(0x0E, 0x20), 0x7F]:
        costs[byte] = _ASCII_COST["\x00"]
    for byte in range(0x80, 0xC0):
        costs[byte] = _CONTINUATION_COST
    for byte in range(0xC0, 0x100):  # lead bytes; C0, C1, F5-FF never occur
        costs[byte] = _LEAD_COST.get(byte, 1.0)
    units = [math.ceil(cost * _SCALE) for cost in costs]
    if max(units) > 255:  # a refit raised a cost: lower _SCALE
        raise ValueError("byte costs do not fit a byte at this scale")
    return bytes(units)


_LOWER = string.ascii_lowercase.encode()
_UPPER = string.ascii_uppercase.encode()
_CONSONANTS = bytes(b for b in _LOWER + _UPPER if b not in b"aeiouyAEIOUY")
_LEADS = bytes(range(0xC0, 0x100))
_CONTINUATIONS = bytes(range(0x80, 0xC0))

_BYTE_UNITS = _byte_units()
_FREE_BYTES = bytes(b for b in range(256) if _BYTE_UNITS[b] == 0)
_ADLER_CHUNK = 65519 // max(_BYTE_UNITS)
_WORDS = _table([(_LOWER, "a"), (_UPPER, "A")])
_SHAPES = _table([(_CONSONANTS, "c"), (string.punctuation.encode(), "p")])
_DIGITS = _table([(string.digits.encode(), "d")])
_WHITESPACE = _table([(string.whitespace.encode(), "s")])
_SPACE_LEADS = _table([(b" ", "s"), (_LEADS, "u")])
_MARKS = _table([(b"\xcc\xcd", "m"), (_CONTINUATIONS, "c"), (_LOWER + _UPPER, "a")])
# Cyrillic lead bytes and two ranges of continuation bytes: "A3" is а-п
# (D0 B0-BF) and "B1" is р-я (D1 80-8F).
_CYRILLIC = _table(
    [
        (b"\xd0", "A"),
        (b"\xd1", "B"),
        (bytes(range(0x80, 0x90)), "1"),
        (bytes(range(0xB0, 0xC0)), "3"),
    ]
)
# Lead bytes E2, E3, EF and the continuation bytes that, after them, single out
# common punctuation ("E0q": E2 80 and the last byte of ’ ‘ “ ” — – … •), CJK
# punctuation ("K0": E3 80), kana ("K1": E3 81-83) and fullwidth forms ("F2").
_THREE_BYTE = _table(
    [
        (b"\xe2", "E"),
        (b"\xe3", "K"),
        (b"\xef", "F"),
        (b"\x80", "0"),
        (b"\x81\x82\x83", "1"),
        (b"\xbc\xbd", "2"),
        (bytes(char.encode()[2] for char in "’‘“”—–…•"), "q"),
    ]
)


def _sum_bytes(data: bytes) -> int:
    """The sum of ``data``'s byte values, at C speed.

    ``sum(data)`` walks Python ints; ``zlib.adler32`` keeps ``1 + sum`` modulo
    65521 in its low 16 bits, which is the exact sum for chunks too short to wrap.
    """
    step = _ADLER_CHUNK
    chunks = range(0, len(data), step)
    return sum((zlib.adler32(data[i : i + step]) & 0xFFFF) - 1 for i in chunks)


def estimate_text(text: str) -> int:
    """Tokens ``text`` may cost, erring high; 0 for the empty string."""
    if not text:
        return 0
    data = text.encode("utf-8", "surrogatepass")
    cost = _TEXT_COST + _sum_bytes(data.translate(_BYTE_UNITS, _FREE_BYTES)) / _SCALE

    words = data.translate(_WORDS) + b" "
    cost += _WORD * (words.count(b"a ") + words.count(b"A "))
    cost += _LONG_WORD_12 * words.count(b"a" * 12) + _LONG_WORD_16 * words.count(b"a" * 16)
    cost += _CASE_HUMP * words.count(b"aA")

    shapes = data.translate(_SHAPES)
    cost += _CONSONANTS_3 * shapes.count(b"ccc") + _CONSONANTS_4 * shapes.count(b"cccc")
    cost += _PUNCT_PAIR * shapes.count(b"pp")
    cost += _SPACE_RUN * (b" " + data.translate(_WHITESPACE)).count(b" ss")
    cost += _DIGIT_RUN * (data.translate(_DIGITS) + b" ").count(b"d ")

    if not data.isascii():
        cost += _non_ascii_corrections(data)
    return min(math.ceil(cost * _SAFETY), len(data))


OFF_LOOP_CHARS = 256 * 2**10
"""Text longer than this is estimated in a thread (about 5 ms of estimate per 256 KiB),
so sizing a long prompt never holds the event loop; shorter text costs less than the
thread's hand-off."""


async def estimate_texts(texts: Sequence[str]) -> int:
    """`estimate_text` summed over `texts`, for the event loop: in a thread when long."""
    if sum(map(len, texts)) <= OFF_LOOP_CHARS:
        return sum(map(estimate_text, texts))
    return await asyncio.to_thread(lambda: sum(map(estimate_text, texts)))


def _non_ascii_corrections(data: bytes) -> float:
    """Shape costs and script discounts that only non-ASCII text needs."""
    cost = _SPACE_BEFORE_NON_ASCII * data.translate(_SPACE_LEADS).count(b"su")
    if b"\xcc" in data or b"\xcd" in data:
        cost += _LETTER_AFTER_MARK * data.translate(_MARKS).count(b"mca")
    if b"\xd0" in data or b"\xd1" in data:
        cyrillic = data.translate(_CYRILLIC)
        cost += _RUSSIAN_LOWERCASE * (cyrillic.count(b"A3") + cyrillic.count(b"B1"))
    if b"\xe2" in data or b"\xe3" in data or b"\xef" in data:
        marks = data.translate(_THREE_BYTE)
        if b"\xe2" in data:
            cost += _COMMON_PUNCTUATION * marks.count(b"E0q")
        if b"\xe3" in data:
            cost += _KANA * marks.count(b"K1") + _CJK_PUNCTUATION * marks.count(b"K0")
        if b"\xef" in data:
            cost += _FULLWIDTH * marks.count(b"F2")
    return cost


def estimate_message(message: Mapping[str, Any]) -> int:
    """Tokens an OpenAI-style chat message costs on the wire, erring high.

    Counts the content (a string, None, or a list of parts), the optional
    ``name``, every tool call (id, function name and arguments) and
    ``tool_call_id``, plus ``MESSAGE_OVERHEAD``. Everything textual is
    estimated as one text, so the fixed per-text cost is paid once.
    """
    texts: list[str] = []
    tokens = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                texts.append(str(part))
            elif part.get("type") == "text":
                texts.append(str(part.get("text") or ""))
            elif part.get("type") in ("image_url", "image", "input_image"):
                tokens += IMAGE_PART_TOKENS
            else:  # audio, files, ...: the JSON is a generous stand-in
                texts.append(json.dumps(part, ensure_ascii=False))
    if message.get("name"):
        texts.append(str(message["name"]))
        tokens += 1
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        texts += [str(call.get("id") or ""), str(function.get("name") or "")]
        texts.append(_as_text(function.get("arguments")))
        tokens += TOOL_CALL_OVERHEAD
    if message.get("tool_call_id"):
        texts.append(str(message["tool_call_id"]))
    return tokens + estimate_text("\n".join(t for t in texts if t))


def estimate_tools(tools: list[dict[str, Any]] | None) -> int:
    """Tokens tool definitions cost: their JSON as sent, plus ``TOOL_OVERHEAD`` each."""
    if not tools:
        return 0
    return estimate_text(json.dumps(tools)) + TOOL_OVERHEAD * len(tools)


def _as_text(value: object) -> str:
    """Tool-call arguments are a JSON string on the wire; anything else is dumped."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
