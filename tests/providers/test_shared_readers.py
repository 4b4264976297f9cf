"""The readers every vendor kind shares: the last word on an error, and tool declarations."""

from __future__ import annotations

from typing import Any

import pytest

from webapp.llm.providers.base import ProviderError, ProviderUnavailable
from webapp.llm.providers.http import refusal
from webapp.llm.providers.shapes import declared_functions


@pytest.mark.parametrize(
    ("status", "credentials", "unavailable", "shown", "kind", "reason"),
    [
        (401, False, False, None, ProviderError, "refused this app's credentials (HTTP 401)"),
        (400, True, False, None, ProviderError, "refused this app's credentials (HTTP 400)"),
        (None, True, False, 403, ProviderError, "refused this app's credentials (HTTP 403)"),
        (None, False, False, None, ProviderUnavailable, "is unavailable"),
        (502, False, False, None, ProviderUnavailable, "is unavailable (HTTP 502)"),
        (408, False, True, None, ProviderUnavailable, "is unavailable (HTTP 408)"),
        (404, False, False, None, ProviderError, "refused the request (HTTP 404)"),
    ],
)
def test_refusal_sorts_what_the_vendor_left_unsaid(
    status: int | None,
    credentials: bool,
    unavailable: bool,
    shown: int | None,
    kind: type[ProviderError],
    reason: str,
) -> None:
    error = refusal(
        "log line", status, credentials=credentials, unavailable=unavailable, shown=shown
    )
    assert type(error) is kind and error.reason == reason
    assert error.status == status and error.message == "log line"
    assert error.retryable is (kind is ProviderUnavailable)


def test_declared_functions_keep_named_functions_and_their_descriptions() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "function": {"name": "weather", "description": "Now", "parameters": schema},
        },
        {"type": "function", "function": {"name": "time"}},
        {"type": "function", "function": {"description": "no name"}},
        {"type": "code_interpreter"},
    ]
    assert declared_functions(tools) == [
        ({"name": "weather", "description": "Now"}, schema),
        ({"name": "time"}, None),
    ]
    assert declared_functions(None) == []
