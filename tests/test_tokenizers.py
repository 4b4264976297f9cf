"""Counting with the model's own tokenizer, over real HTTP against engine-like servers.

The fake upstream counts with Qwen's vocabulary here, which the estimate was not fitted
to, so a count that merely looks plausible would not pass: it must equal the server's.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.catalogs import CLOSED_PORT_URL, catalog_for, model_toml, write_catalog
from tests.upstream import Engine, FakeUpstream, count_tokens
from webapp.llm.catalog import CatalogError, load_catalog
from webapp.llm.estimator import estimate_text
from webapp.llm.tokenizer_settings import TokenizerConfigError
from webapp.llm.tokenizers import (
    EstimateTokenizer,
    HuggingFaceTokenizer,
    ServerTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    Tokenizers,
    TokenizerUnavailable,
)

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "东京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "Party time 🎉🎉 👩‍👩‍👧‍👦 🇯🇵 ✨",
    '{"id": 42, "tags": ["a", "b"], "nested": {"ok": true, "price": 3.14}}',
    "Ünïcödé naïve café — “quotes” and ‘apostrophes’",
    "a" * 500,
    "<|im_start|>system\nspecial-token text is ordinary text<|im_end|>",
    "",
]

SHAPES = {
    "llamacpp": ("llama.cpp /tokenize", "/tokenize", "content"),
    "llama-cpp-python": ("llama-cpp-python /extras/tokenize", "/extras/tokenize", "input"),
    "vllm": ("vLLM /tokenize", "/tokenize", "prompt"),
}


def tokenize_requests(up: FakeUpstream) -> list[dict]:
    return [r for r in up.requests if r["path"] in ("/tokenize", "/extras/tokenize")]


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("COUNTING_TEST_KEY", "sk-test-counting")
    yield "sk-test-counting"


# --------------------------------------------------------------------------- server


@pytest.mark.parametrize("engine", sorted(SHAPES))
async def test_each_shape_is_probed_and_counts_exactly_like_the_server(
    engine: Engine, engine_upstream: FakeUpstream, tmp_path: Path, key: str
) -> None:
    up = engine_upstream
    up.set_engine(engine)
    catalog = catalog_for(tmp_path, up)
    described, path, field = SHAPES[engine]
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        model = catalog.models["m"]
        tokenizer = tokenizers.for_model(model)
        assert isinstance(tokenizer, ServerTokenizer)
        assert (tokenizer.id, tokenizer.exact) == ("server:m", True)
        assert tokenizers.describe(model) == f"server ({described})"
        assert tokenizers.errors == {}
        up.reset()
        up.set_engine(engine)
        counts = await tokenizer.count(TEXTS)
    assert counts == [up.count(text) for text in TEXTS]
    requests = tokenize_requests(up)
    assert len(requests) == len(TEXTS)
    assert all(r["path"] == path and field in r["body"] for r in requests)
    assert all(r["headers"]["authorization"] == f"Bearer {key}" for r in requests)
    if engine == "vllm":
        assert all(r["body"]["model"] == "medium" for r in requests)
        assert all(r["body"]["add_special_tokens"] is False for r in requests)


async def test_the_server_counts_what_cl100k_and_the_estimate_do_not(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Why the server's count matters: Qwen splits CJK and emoji unlike cl100k."""
    engine_upstream.set_engine("llamacpp")
    async with Tokenizers() as tokenizers:
        catalog = catalog_for(tmp_path, engine_upstream)
        await tokenizers.probe(catalog)
        counts = await tokenizers.for_model(catalog.models["m"]).count(TEXTS[:5])
    assert counts != [count_tokens(text) for text in TEXTS[:5]]
    assert counts != [estimate_text(text) for text in TEXTS[:5]]


async def test_llamacpp_is_not_mistaken_for_vllm(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Both answer at /tokenize; llama.cpp answers vLLM's body with no tokens, so the
    probe must go on to llama.cpp's shape rather than settle for a count of zero."""
    engine_upstream.set_engine("llamacpp")
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog_for(tmp_path, engine_upstream))
    bodies = [r["body"] for r in tokenize_requests(engine_upstream)]
    assert [sorted(body) for body in bodies] == [
        ["add_special_tokens", "model", "prompt"],
        ["content"],
    ]


async def test_a_failing_endpoint_raises_rests_and_recovers(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    up = engine_upstream
    up.set_engine("vllm")
    async with Tokenizers(down_for=0.5) as tokenizers:
        catalog = catalog_for(tmp_path, up)
        await tokenizers.probe(catalog)
        tokenizer = tokenizers.for_model(catalog.models["m"])
        up.fail_tokenize(500, count=1)
        with pytest.raises(TokenizerUnavailable, match="HTTP 500"):
            await tokenizer.count(["hello"])
        before = len(tokenize_requests(up))
        with pytest.raises(TokenizerUnavailable, match="resting"):
            await tokenizer.count(["hello"])
        assert len(tokenize_requests(up)) == before, "a resting endpoint is not called"
        await asyncio.sleep(0.6)
        assert await tokenizer.count(["hello"]) == [up.count("hello")]


async def test_a_slow_endpoint_gives_up_within_the_timeout_and_rests(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    up = engine_upstream
    up.set_engine("llama-cpp-python")
    async with Tokenizers(timeout=0.5) as tokenizers:
        catalog = catalog_for(tmp_path, up)
        await tokenizers.probe(catalog)
        tokenizer = tokenizers.for_model(catalog.models["m"])
        up.stall_tokenize(3.0, count=5)
        started = time.monotonic()
        with pytest.raises(TokenizerUnavailable, match=r"within 0\.5 s"):
            await tokenizer.count(TEXTS)
        assert time.monotonic() - started < 1.2
        started = time.monotonic()
        with pytest.raises(TokenizerUnavailable):
            await tokenizer.count(TEXTS)
        assert time.monotonic() - started < 0.05, "resting: no second wait"


async def test_many_texts_are_counted_concurrently_but_boundedly(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """40 texts that take 0.2 s each: one at a time would take 8 s, all at once 0.2 s;
    eight in flight take five rounds, about 1 s."""
    up = engine_upstream
    up.set_engine("llamacpp")
    async with Tokenizers(timeout=6.0, concurrency=8) as tokenizers:
        catalog = catalog_for(tmp_path, up)
        await tokenizers.probe(catalog)
        up.stall_tokenize(0.2, count=40)
        texts = [f"text number {i}" for i in range(40)]
        started = time.monotonic()
        counts = await tokenizers.for_model(catalog.models["m"]).count(texts)
        elapsed = time.monotonic() - started
    assert counts == [up.count(text) for text in texts]
    assert 0.95 <= elapsed < 4.0, elapsed


async def test_server_setting_without_an_endpoint_is_an_error(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    engine_upstream.set_engine("ollama")  # Ollama has no tokenize endpoint
    catalog = catalog_for(tmp_path, engine_upstream, tokenizer="server")
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        model = catalog.models["m"]
        assert isinstance(tokenizers.for_model(model), EstimateTokenizer)
        assert "no tokenize endpoint answered" in tokenizers.errors["m"]
        assert tokenizers.describe(model).startswith("estimate (ERROR: 'server'")


@pytest.mark.parametrize("engine", ["openai", "ollama", "lmstudio"])
async def test_auto_without_an_endpoint_counts_with_the_estimate(
    engine: Engine, engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    engine_upstream.set_engine(engine)
    catalog = catalog_for(tmp_path, engine_upstream)
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        model = catalog.models["m"]
        tokenizer = tokenizers.for_model(model)
        assert (tokenizer.id, tokenizer.exact) == ("estimate", False)
        assert tokenizers.errors == {}
        assert tokenizers.describe(model).startswith("estimate (no tokenize endpoint found")
        assert await tokenizer.count(TEXTS) == [estimate_text(text) for text in TEXTS]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers: the slowest server there is."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    sock.close()


async def test_probing_is_bounded_in_time_and_never_raises(
    silent_server: str, tmp_path: Path
) -> None:
    models = "\n".join(
        model_toml(name=f"m{i}", tokenizer="server" if i % 2 else None) for i in range(6)
    )
    path = write_catalog(tmp_path, silent_server, models.replace('name = "m0"', 'name = "m"'))
    catalog = load_catalog(path)
    async with Tokenizers(timeout=0.5) as tokenizers:
        started = time.monotonic()
        await tokenizers.probe(catalog)
        assert time.monotonic() - started < 1.5, "all models are probed at once"
        for model in catalog.models.values():
            assert isinstance(tokenizers.for_model(model), EstimateTokenizer)
            assert "within 0.5 s" in tokenizers.describe(model)
        assert sorted(tokenizers.errors) == ["m1", "m3", "m5"]


async def test_an_unreachable_server_is_found_out_at_once(tmp_path: Path) -> None:
    catalog = load_catalog(write_catalog(tmp_path, CLOSED_PORT_URL, model_toml()))
    async with Tokenizers() as tokenizers:
        started = time.monotonic()
        await tokenizers.probe(catalog)
        assert time.monotonic() - started < 1.0
        assert tokenizers.for_model(catalog.models["m"]).id == "estimate"
        assert tokenizers.describe(catalog.models["m"]) == (
            "estimate (cannot connect to http://127.0.0.1:9 (ConnectError))"
        )


async def test_a_refused_key_is_told_apart_from_a_missing_endpoint(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    engine_upstream.set_engine("llamacpp")
    engine_upstream.fail_tokenize(401, count=3)
    catalog = catalog_for(tmp_path, engine_upstream)
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        assert "refused the key (HTTP 401): check api_key_env" in tokenizers.describe(
            catalog.models["m"]
        )


async def test_an_unprobed_model_counts_with_the_estimate() -> None:
    catalog = load_catalog(None)
    async with Tokenizers() as tokenizers:
        model = catalog.models["demo"]
        assert tokenizers.for_model(model).id == "estimate"
        assert tokenizers.describe(model) == "estimate (not probed)"
        await tokenizers.probe(catalog)
        assert model.tokenizer == "estimate"
        assert tokenizers.describe(model) == "estimate (configured)"


# --------------------------------------------------------------------------- local


async def test_tiktoken_counts_like_cl100k(tmp_path: Path) -> None:
    tokenizer = TiktokenTokenizer("cl100k_base")
    assert isinstance(tokenizer, Tokenizer)
    assert (tokenizer.id, tokenizer.exact) == ("tiktoken:cl100k_base", True)
    assert await tokenizer.count(TEXTS) == [count_tokens(text) for text in TEXTS]
    long = TEXTS[1] * 400  # over the threshold: counted in a thread, same answer
    assert await tokenizer.count([long]) == [count_tokens(long)]
    with pytest.raises(TokenizerConfigError, match="unknown tiktoken encoding 'nope'"):
        TiktokenTokenizer("nope")


def train_tokenizer_json(path: Path) -> Path:
    """A tiny byte-level BPE trained on a few sentences: a real tokenizer.json, no download."""
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = HF(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    sentences = [
        "the quick brown fox jumps over the lazy dog",
        "counting tokens with the model's own tokenizer",
        "the window is discovered from the server",
    ] * 20
    tokenizer.train_from_iterator(sentences, trainer=trainer)
    tokenizer.save(str(path))
    return path


async def test_huggingface_counts_with_the_file(tmp_path: Path) -> None:
    from tokenizers import Tokenizer as HF

    path = train_tokenizer_json(tmp_path / "tokenizer.json")
    tokenizer = HuggingFaceTokenizer(path)
    assert (tokenizer.id, tokenizer.exact) == (f"huggingface:{path}", True)
    reference = HF.from_file(str(path))
    expected = [len(reference.encode(text, add_special_tokens=False).ids) for text in TEXTS]
    assert await tokenizer.count(TEXTS) == expected
    assert expected[0] < len(TEXTS[0]), "trained merges are used, not single bytes"
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(TokenizerConfigError, match="cannot load tokenizer file"):
        HuggingFaceTokenizer(tmp_path / "broken.json")


async def test_catalog_settings_resolve_to_local_tokenizers(tmp_path: Path) -> None:
    """A relative huggingface path is read from the catalog's folder, not the cwd."""
    (tmp_path / "tok").mkdir()
    train_tokenizer_json(tmp_path / "tok" / "tokenizer.json")
    models = (
        model_toml(tokenizer="huggingface:tok/tokenizer.json")
        + "\n"
        + model_toml(name="t", tokenizer="tiktoken:cl100k_base")
        + "\n"
        + model_toml(name="e", tokenizer="estimate")
        + '\n[[models]]\nname = "d"\nprovider = "demo"\n'
    )
    catalog = load_catalog(write_catalog(tmp_path, CLOSED_PORT_URL, models))
    absolute = (tmp_path / "tok" / "tokenizer.json").resolve()
    assert catalog.models["m"].tokenizer == f"huggingface:{absolute}"
    assert catalog.models["d"].tokenizer == "estimate"
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        ids = {name: tokenizers.for_model(spec).id for name, spec in catalog.models.items()}
        assert ids == {
            "m": f"huggingface:{absolute}",
            "t": "tiktoken:cl100k_base",
            "e": "estimate",
            "d": "estimate",
        }
        assert tokenizers.describe(catalog.models["t"]) == "tiktoken cl100k_base"
        assert tokenizers.describe(catalog.models["d"]) == "estimate (configured)"


# --------------------------------------------------------------------------- catalog


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ('"bogus"', "unknown tokenizer 'bogus'"),
        ('"sever"', "did you mean 'server'?"),
        ("42", "expected a string"),
        ('"auto:x"', "'auto' takes no argument"),
        ('"tiktoken:"', "'tiktoken:' needs an encoding"),
        ('"tiktoken:cl100k"', "unknown tiktoken encoding 'cl100k' (did you mean 'cl100k_base'?)"),
        ('"huggingface:"', "'huggingface:' needs the path"),
        ('"huggingface:nowhere/tokenizer.json"', "tokenizer file not found: "),
    ],
)
def test_bad_tokenizer_settings_name_file_entry_and_field(
    value: str, fragment: str, tmp_path: Path
) -> None:
    path = write_catalog(tmp_path, CLOSED_PORT_URL, model_toml() + f"tokenizer = {value}\n")
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    [line] = caught.value.errors
    assert line.startswith(f"{path}: models[0] 'm': field 'tokenizer': "), line
    assert fragment in line, line
    if "not found" in fragment:
        assert str(tmp_path / "nowhere" / "tokenizer.json") in line


def test_server_on_the_demo_provider_is_refused(tmp_path: Path) -> None:
    models = model_toml() + '\n[[models]]\nname = "d"\nprovider = "demo"\ntokenizer = "server"\n'
    with pytest.raises(CatalogError) as caught:
        load_catalog(write_catalog(tmp_path, CLOSED_PORT_URL, models))
    [line] = caught.value.errors
    assert "models[1] 'd': field 'tokenizer': the demo provider has no tokenize endpoint" in line


@pytest.mark.parametrize(
    ("setting", "package", "extra"),
    [
        ("huggingface:tokenizer.json", "tokenizers", "huggingface"),
        ("tiktoken:gpt2", "tiktoken", "tiktoken"),
    ],
)
def test_a_missing_package_is_named_with_its_extra(
    setting: str, package: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    (tmp_path / "tokenizer.json").write_text("{}")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        "webapp.llm.tokenizer_settings.importlib.util.find_spec",
        lambda name, *args: None if name == package else real(name, *args),
    )
    path = write_catalog(tmp_path, CLOSED_PORT_URL, model_toml(tokenizer=setting))
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    [line] = caught.value.errors
    assert "models[0] 'm': field 'tokenizer'" in line
    assert f"needs the '{package}' package" in line and f"webapp[{extra}]" in line
    # the registry, built from the setting without a catalog, says the same
    with pytest.raises(TokenizerConfigError) as built:
        if package == "tiktoken":
            TiktokenTokenizer("gpt2")
        else:
            HuggingFaceTokenizer(tmp_path / "tokenizer.json")
    assert line.endswith(f"field 'tokenizer': {built.value}"), (line, built.value)


async def test_a_tokenizer_file_gone_by_start_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = train_tokenizer_json(tmp_path / "tokenizer.json")
    catalog = load_catalog(
        write_catalog(tmp_path, CLOSED_PORT_URL, model_toml(tokenizer=f"huggingface:{path}"))
    )
    path.write_text("{}")  # replaced by something unreadable after the catalog was checked
    async with Tokenizers() as tokenizers:
        await tokenizers.probe(catalog)
        assert tokenizers.for_model(catalog.models["m"]).id == "estimate"
        assert "cannot load tokenizer file" in tokenizers.errors["m"]
        assert tokenizers.describe(catalog.models["m"]).startswith("estimate (ERROR: ")
