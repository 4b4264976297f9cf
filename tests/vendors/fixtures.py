"""The pytest fixtures: the session's fake vendors (reset before and after each test),
and their keys in the environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.upstream.fixtures import SessionServer
from tests.vendors.catalogs import KEY_ENV
from tests.vendors.fake import FakeVendors


@pytest.fixture
def vendor_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """KEY_ENV in the environment, for catalogs made by `providers_toml`."""
    for variable, key in KEY_ENV.items():
        monkeypatch.setenv(variable, key)


_vendors = SessionServer(lambda: FakeVendors().start())


@pytest.fixture
def vendors(request: pytest.FixtureRequest) -> Iterator[FakeVendors]:
    """The session's fake vendors (started on first use), reset before and after each test."""
    yield from _vendors.around(request)
