"""Windows discovered from the serving engine, over real HTTP, and shown by check-config."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.catalogs import CLOSED_PORT_URL
from tests.factories import run
from tests.upstream import Engine, FakeUpstream
from webapp.llm.catalog import DEFAULT_WINDOW, Catalog, load_catalog
from webapp.llm.discovery import NOT_DISCOVERABLE, clear_cache, discover


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    """Each test is a process start: the fixture servers reuse ports between tests."""
    clear_cache()
    yield
    clear_cache()


def catalog_text(base_url: str, models: str, key_env: str | None = None) -> str:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    return f"""
[[providers]]
name = "up"
kind = "openai"
base_url = "{base_url}"
{key}
[[providers]]
name = "down"
kind = "openai"
base_url = "{CLOSED_PORT_URL}"

[[providers]]
name = "demo"
kind = "demo"

{models}

[[configurations]]
name = "c"
model = "m"
"""


def model(name: str = "m", model_id: str = "medium", provider: str = "up", extra: str = "") -> str:
    return (
        f'[[models]]\nname = "{name}"\nprovider = "{provider}"\nmodel_id = "{model_id}"\n{extra}\n'
    )


def load(tmp_path: Path, base_url: str, models: str, key_env: str | None = None) -> Catalog:
    path = tmp_path / "catalog.toml"
    path.write_text(catalog_text(base_url, models, key_env))
    return load_catalog(path)


ENGINES = [
    ("vllm", {"medium": 3000, "other": 5000}, {}, 3000, "server: vLLM /v1/models"),
    ("llamacpp", {"medium": 3000}, {}, 3000, "server: llama.cpp /props"),
    (
        "lmstudio",
        {"other": 5000, "medium": 3000},
        {},
        3000,
        "server: LM Studio /api/v0/models loaded_context_length",
    ),
    ("ollama", {"medium": 32768}, {"medium": 2048}, 2048, "server: Ollama /api/show num_ctx"),
    ("ollama", {"medium": 32768}, {}, 32768, "server: Ollama /api/show context_length"),
]


@pytest.mark.parametrize(("engine", "models", "num_ctx", "window", "source"), ENGINES)
async def test_each_engine_window_is_discovered(
    engine: Engine,
    models: dict[str, int],
    num_ctx: dict[str, int],
    window: int,
    source: str,
    engine_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    up = engine_upstream
    up.set_engine(engine)
    up.set_models(models)
    up.set_num_ctx(num_ctx)
    monkeypatch.setenv("DISCOVERY_TEST_KEY", "sk-discovery")
    catalog = load(tmp_path, up.base_url, model(), key_env="DISCOVERY_TEST_KEY")
    assert catalog.models["m"].context_window is None
    found, sources = await discover(catalog)
    assert found.models["m"].context_window == window
    assert found.models["m"].window == window
    assert sources["m"].source == source
    assert sources["m"].server_window == window
    assert catalog.models["m"].context_window is None, "the input catalog is left alone"
    asked = [r for r in up.requests if r["path"] != "/v1/chat/completions"]
    assert asked and all(r["headers"]["authorization"] == "Bearer sk-discovery" for r in asked)
    if source == "server: Ollama /api/show context_length":
        assert "num_ctx" in sources["m"].notes[0]
    else:
        assert sources["m"].notes == ()


async def test_the_discovered_window_is_the_one_the_server_enforces(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Ollama's num_ctx is what a request gets, not the model's context_length."""
    up = engine_upstream
    up.set_engine("ollama")
    up.set_models({"medium": 32768})
    up.set_num_ctx({"medium": 512})
    found, _ = await discover(load(tmp_path, up.base_url, model()))
    import httpx

    window = found.models["m"].window
    async with httpx.AsyncClient(base_url=up.base_url) as client:
        words = " ".join(["word"] * window)
        answer = await client.post(
            "/chat/completions",
            json={"model": "medium", "messages": [{"role": "user", "content": words}]},
        )
    assert answer.status_code == 400 and str(window) in answer.text


async def test_a_configured_window_larger_than_the_servers_is_reported(
    engine_upstream: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    up = engine_upstream
    up.set_engine("vllm")
    up.set_models({"medium": 4096, "small": 1024})
    models = model(extra="context_window = 8000") + model(
        "s", "small", extra="context_window = 512"
    )
    with caplog.at_level(logging.WARNING, logger="webapp.llm.discovery"):
        found, sources = await discover(load(tmp_path, up.base_url, models))
    assert found.models["m"].context_window == 8000, "the file is obeyed, and reported"
    assert sources["m"].source == "configured" and sources["m"].server_window == 4096
    [note] = sources["m"].notes
    assert "configured window 8,000 is larger than the server's 4,096 (vLLM /v1/models)" in note
    assert any("larger than the server's" in r.getMessage() for r in caplog.records)
    assert sources["s"].source == "configured" and sources["s"].notes == ()


async def test_a_reply_size_that_leaves_no_room_in_the_discovered_window_is_reported(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The catalog accepts max_output_tokens for a window it does not know yet."""
    engine_upstream.set_engine("llamacpp")
    engine_upstream.set_models({"medium": 2048})
    catalog = load(tmp_path, engine_upstream.base_url, model(extra="max_output_tokens = 4000"))
    _, sources = await discover(catalog)
    [note] = sources["m"].notes
    assert "max_output_tokens 4,000 is not less than the window 2,048" in note


async def test_neither_configured_nor_discoverable_is_the_default_with_a_warning(
    upstream: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    models = model() + model("gone", provider="down") + model("d", provider="demo")
    catalog = load(tmp_path, upstream.base_url, models)  # engine "openai": nothing to ask
    with caplog.at_level(logging.WARNING, logger="webapp.llm.discovery"):
        started = time.monotonic()
        found, sources = await discover(catalog)
        assert time.monotonic() - started < 1.5
    for name in ("m", "gone"):
        assert sources[name].source == NOT_DISCOVERABLE
        assert sources[name].window == DEFAULT_WINDOW == found.models[name].window
        assert found.models[name].context_window is None
    assert sources["d"].source == "configured"
    warned = [r.getMessage() for r in caplog.records]
    assert sum("not configured and not discoverable" in m for m in warned) == 2


async def test_a_silent_server_costs_one_timeout_at_most(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        models = "".join(model(f"m{i}" if i else "m") for i in range(5))
        started = time.monotonic()
        _, sources = await discover(load(tmp_path, url, models), timeout=0.5)
        assert time.monotonic() - started < 1.5
    assert {source.source for source in sources.values()} == {NOT_DISCOVERABLE}


async def test_discovery_is_cached_for_the_process_and_shared_per_server(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    up = engine_upstream
    up.set_engine("llamacpp")
    up.set_models({"medium": 3000})
    models = "".join(model(f"m{i}" if i else "m") for i in range(4))
    catalog = load(tmp_path, up.base_url, models)
    await discover(catalog)
    assert [r["path"] for r in up.requests].count("/props") == 1, "asked once per server"
    count = len(up.requests)
    found, _ = await discover(catalog)
    assert len(up.requests) == count, "cached: a restart discovers again, a second call not"
    assert found.models["m3"].context_window == 3000
    up.set_models({"medium": 6000})
    found, sources = await discover(catalog, refresh=True)
    assert found.models["m"].context_window == 6000
    assert sources["m"].source == "server: llama.cpp /props"


async def test_broken_answers_are_not_discoverable_and_do_not_raise(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """vLLM lists the model under another id: nothing matches, nothing is guessed."""
    engine_upstream.set_engine("vllm")
    engine_upstream.set_models({"another": 3000})
    _, sources = await discover(load(tmp_path, engine_upstream.base_url, model()))
    assert sources["m"].source == NOT_DISCOVERABLE


def test_check_config_lists_windows_tokenizers_and_where_they_came_from(
    engine_upstream: FakeUpstream, tmp_path: Path
) -> None:
    up = engine_upstream
    up.set_engine("vllm")
    up.set_models({"medium": 3000})
    models = (
        model()
        + model("fixed", extra="context_window = 9000")
        + model("gone", provider="down", extra='tokenizer = "server"')
        + model("d", provider="demo")
    )
    path = tmp_path / "catalog.toml"
    path.write_text(catalog_text(up.base_url, models))
    started = time.monotonic()
    result = run("check-config", str(path))
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "model 'm': window 3,000 (server: vLLM /v1/models)" in out
    assert "tokenizer: server (vLLM /tokenize)" in out
    assert "model 'fixed': window 9,000 (configured)" in out
    assert "warning: configured window 9,000 is larger than the server's 3,000" in out
    assert f"model 'gone': window 8,192 ({NOT_DISCOVERABLE})" in out
    assert "'server' but no tokenize endpoint answered: cannot connect to http://127.0.0.1:9" in out
    assert "model 'd': window 2,048 (configured)" in out
    served = "configuration 'c': served by m (window 3,000; a moved cut keeps 75% of the budget)"
    assert served in out
    assert elapsed < 20
