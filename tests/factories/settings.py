"""Test settings: the one place tests build `Settings`, on a catalog file of their own or on
the fake upstream's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.catalogs import Upstream, write_upstream_catalog
from webapp.settings import Settings

EMBED = """
[[embeds]]
name = "support"
configuration = "small"
allowed_origins = ["https://shop.example.com", "http://127.0.0.1:8799"]
title = "Ask us"
greeting = "Hi! How can we help?"
"""
"""An embed of the `small` configuration, for the catalogs of the embed and security tests."""

SERVICE: dict[str, Any] = {"stream_flush_interval": 0.05, "max_message_chars": 5000}
"""The service tests' settings: quick flushes, room for long messages."""


def settings_on(database_url: str, config: Path | None, **fields: Any) -> Settings:
    """Settings on the catalog file `config` (None: the built-in demo), with `fields` set;
    what is not set comes from the environment as in production (conftest.py turns model
    titles off there)."""
    return Settings(database_url=database_url, config=config, **fields)


def settings_for(
    database_url: str, tmp_path: Path, upstream: Upstream, extra: str = "", **fields: Any
) -> Settings:
    """Settings on the fake upstream's catalog (`extra` adds catalog entries), with `fields`
    set (the `settings` marker of a test module gives both to the `settings` fixture)."""
    catalog = write_upstream_catalog(tmp_path / "catalog.toml", upstream, extra)
    return settings_on(database_url, catalog, **fields)


def service_settings_on(database_url: str, config: Path, **fields: Any) -> Settings:
    """The service tests' settings (SERVICE) on the catalog file `config`, `fields` over
    them."""
    return settings_on(database_url, config, **{**SERVICE, **fields})


def service_settings(
    database_url: str, tmp_path: Path, upstream: Upstream, extra: str = "", **fields: Any
) -> Settings:
    """The service tests' settings on the fake upstream's catalog; `extra` adds catalog
    entries, `fields` go over SERVICE."""
    return settings_for(database_url, tmp_path, upstream, extra, **{**SERVICE, **fields})
