"""What the tests build, in one place: settings, apps and the conversation service, users
and their sign-in, and the small readers of what the app answers.

Plain functions and classes only: the fixtures built on them live in the conftest.py
files, each defined once, so a test module takes them by name and imports no other test
module. One job a module: `settings`, `service` (the conversation service on its own),
`users` (accounts and tokens), `web` (test clients, pages, forms, event streams), `admin`
(the admin controller on its own), `manager` (the model manager on its own), `rows`
(rows written straight to the database), `views` (what the pages draw, built alone)
and `cli` (the command line).
"""

from __future__ import annotations

from tests.factories.admin import admin_client, user_from_header
from tests.factories.cli import WEBAPP, run, run_in_child, run_on
from tests.factories.manager import CALLER, collect, finished, long_transcript
from tests.factories.rows import writing_answers
from tests.factories.service import OWNER, build_service, close_service, probed_service, say
from tests.factories.settings import (
    EMBED,
    SERVICE,
    service_settings,
    service_settings_on,
    settings_for,
    settings_on,
)
from tests.factories.users import (
    PASSWORD,
    TEST_HASHER,
    accounts_call,
    accounts_on,
    add_user,
    bearer_header,
    make_account,
    make_user,
    user_header,
)
from tests.factories.views import meter
from tests.factories.web import (
    Client,
    api_client,
    csrf_from,
    found,
    htmx_headers,
    new_conversation,
    parse_sse,
    sign_in,
)

__all__ = [
    "CALLER",
    "EMBED",
    "OWNER",
    "PASSWORD",
    "SERVICE",
    "TEST_HASHER",
    "WEBAPP",
    "Client",
    "accounts_call",
    "accounts_on",
    "add_user",
    "admin_client",
    "api_client",
    "bearer_header",
    "build_service",
    "close_service",
    "collect",
    "csrf_from",
    "finished",
    "found",
    "htmx_headers",
    "long_transcript",
    "make_account",
    "make_user",
    "meter",
    "new_conversation",
    "parse_sse",
    "probed_service",
    "run",
    "run_in_child",
    "run_on",
    "say",
    "service_settings",
    "service_settings_on",
    "settings_for",
    "settings_on",
    "sign_in",
    "user_from_header",
    "user_header",
    "writing_answers",
]
