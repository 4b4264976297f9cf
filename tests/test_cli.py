"""The `webapp` command from a shell: migrate, check-config, purge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.catalogs import write_upstream_catalog
from tests.factories import PASSWORD, run
from tests.upstream import FakeUpstream
from webapp.migrate import head_revision, upgrade
from webapp.web import heap


def test_migrate_creates_the_schema_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh' / 'webapp.db'}"
    said = []
    for _ in range(2):
        result = run("migrate", env={"WEBAPP_DATABASE_URL": url})
        assert result.returncode == 0, result.stderr
        said.append(result.stdout)
    assert said[0].startswith("created the schema") and "up to date" not in said[0], said
    assert said[1].startswith("the schema is up to date"), said
    older = f"sqlite+aiosqlite:///{tmp_path / 'older' / 'webapp.db'}"
    (tmp_path / "older").mkdir()
    assert upgrade(older, "0018") is None
    result = run("migrate", env={"WEBAPP_DATABASE_URL": older})
    assert result.stdout.startswith(f"upgraded the schema from revision 0018 to {head_revision()}")
    import sqlite3

    tables = {
        row[0]
        for row in sqlite3.connect(tmp_path / "fresh" / "webapp.db").execute(
            "SELECT name FROM sqlite_master WHERE type='table'"
        )
    }
    assert {"conversation", "message", "model_calibration", "user_account"} <= tables


def test_check_config_accepts_a_good_file(tmp_path: Path, upstream: FakeUpstream) -> None:
    path = write_upstream_catalog(tmp_path / "good.toml", upstream)
    result = run("check-config", str(path))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout and "'cheapest-4k': served by medium" in result.stdout
    builtin = run("check-config", env={"WEBAPP_CONFIG": ""})
    assert builtin.returncode == 0 and "built-in demo catalog" in builtin.stdout


def test_check_config_names_file_entry_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        '[[providers]]\nname = "p"\nkind = "openai"\nbase_url = "http://x/v1"\n\n'
        '[[models]]\nname = "m"\nprovider = "nope"\ncontext_window = -5\n\n'
        '[[configurations]]\nname = "c"\nmodel = "m"\nfallbacks = ["ghost"]\n'
    )
    result = run("check-config", str(path))
    assert result.returncode == 1
    for fragment in (
        "bad.toml",
        "models[0] 'm'",
        "field 'provider'",
        "field 'context_window'",
        "field 'fallbacks'",
    ):
        assert fragment in result.stderr, (fragment, result.stderr)


def test_a_bad_catalog_fails_at_start(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[[models]\n")
    result = subprocess.run(
        [sys.executable, "-c", "import webapp.asgi"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "WEBAPP_CONFIG": str(path)},
    )
    assert result.returncode != 0
    assert "broken.toml" in result.stderr and "line 1" in result.stderr


def test_a_serving_process_freezes_what_it_loaded_at_start(sqlite_url: str) -> None:
    """`webapp.asgi`, what each `webapp serve` process imports, sets the collector once the
    app has started (webapp.web.heap); a cycle made later is still collected."""
    script = (
        "import gc\n"
        "from litestar.testing import TestClient\n"
        "from webapp.asgi import app\n"
        "assert gc.get_freeze_count() == 0\n"
        "with TestClient(app) as client:\n"
        "    assert client.get('/healthz').status_code == 200\n"
        "    cycle = []; cycle.append(cycle); del cycle\n"
        "    print(gc.get_freeze_count(), gc.get_threshold()[0], gc.collect())\n"
    )
    env = {**os.environ, "WEBAPP_DATABASE_URL": sqlite_url, "WEBAPP_CONFIG": ""}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert result.returncode == 0, result.stderr
    frozen, young, collected = (int(word) for word in result.stdout.split())
    assert frozen > 50_000 and young == heap.YOUNG and collected >= 1


@pytest.mark.parametrize("dry_run", [True, False])
def test_purge_deletes_idle_conversations(tmp_path: Path, sqlite_url: str, dry_run: bool) -> None:
    import sqlite3

    database = sqlite_url.split("///", 1)[1]
    with sqlite3.connect(database) as db:
        db.execute(
            "INSERT INTO conversation (id, owner, configuration, title, created_at, updated_at) "
            "VALUES ('old', 'someone', 'demo', 'Old one', '2020-01-01', '2020-01-01'), "
            "('new', 'someone', 'demo', 'New one', datetime('now'), datetime('now'))"
        )
    args = ["purge", "--days", "30", *(["--dry-run"] if dry_run else [])]
    result = run(*args, env={"WEBAPP_DATABASE_URL": sqlite_url})
    assert result.returncode == 0, result.stderr
    assert ("would delete 1" if dry_run else "deleted 1") in result.stdout
    assert "Old one" in result.stdout and "New one" not in result.stdout
    with sqlite3.connect(database) as db:
        left = sorted(row[0] for row in db.execute("SELECT id FROM conversation"))
    assert left == (["new", "old"] if dry_run else ["new"])


def test_user_delete_takes_the_account_and_what_was_theirs(sqlite_url: str) -> None:
    env = {"WEBAPP_DATABASE_URL": sqlite_url}
    made = run("user", "create", "dora", "--password-stdin", env=env, stdin=PASSWORD + "\n")
    assert made.returncode == 0, made.stderr
    deleted = run("user", "delete", "DORA", env=env)
    assert deleted.returncode == 0 and "deleted user 'dora'" in deleted.stdout
    again = run("user", "delete", "dora", env=env)
    assert again.returncode == 1 and "no user named 'dora'" in again.stderr
