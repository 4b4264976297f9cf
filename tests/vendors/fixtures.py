"""The pytest fixtures: the session's fake vendors (reset before and after each test),
and their keys in the environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.vendors.catalogs import KEY_ENV
from tests.vendors.fake import FakeVendors


@pytest.fixture
def vendor_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """KEY_ENV in the environment, for catalogs made by `providers_toml`."""
    for variable, key in KEY_ENV.items():
        monkeypatch.setenv(variable, key)


_session_vendors: FakeVendors | None = None


def _stop_session_vendors() -> None:
    global _session_vendors
    if _session_vendors is not None:
        _session_vendors.stop()
        _session_vendors = None


@pytest.fixture
def vendors(request: pytest.FixtureRequest) -> Iterator[FakeVendors]:
    """The session's fake vendors (started on first use), reset before and after each test."""
    global _session_vendors
    if _session_vendors is None:
        _session_vendors = FakeVendors().start()
        request.config.add_cleanup(_stop_session_vendors)
    _session_vendors.reset()
    yield _session_vendors
    _session_vendors.reset()
