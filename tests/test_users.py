"""Users managed from the UI and the API (docs/design.md section 9), on both databases: admins
create, promote, deactivate and reset; deactivating ends sessions and tokens; the last
active admin stays one; everyone changes their own password."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.factories import PASSWORD, accounts_call, api_client, bearer_header, make_user
from webapp.settings import Settings


@pytest.fixture
async def admin(settings: Settings) -> AsyncIterator[AsyncTestClient]:
    """The test client as an admin (root), with an API token."""
    async with api_client(settings, "root", admin=True) as client:
        yield client


async def create(admin: AsyncTestClient, name: str, **extra: Any) -> dict[str, Any]:
    response = await admin.post(
        "/api/admin/users", json={"username": name, "password": PASSWORD, **extra}
    )
    assert response.status_code == 201, response.text
    return response.json()


async def patch(admin: AsyncTestClient, user_id: int, **changes: Any) -> Any:
    return await admin.patch(f"/api/admin/users/{user_id}", json=changes)


async def test_only_admins_manage_users(admin: AsyncTestClient, database_url: str) -> None:
    bob = await make_user(database_url, "bob")
    as_bob = bearer_header(bob)
    assert (await admin.get("/api/admin/users", headers=as_bob)).status_code == 403
    forbidden = await admin.post(
        "/api/admin/users", json={"username": "x", "password": PASSWORD}, headers=as_bob
    )
    assert forbidden.status_code == 403
    assert (await admin.get("/admin/users", headers=as_bob)).status_code == 403
    page = await admin.get("/admin/users")
    assert page.status_code == 200 and "bob" in page.text and "Reset password" in page.text


async def test_create_list_and_promote(admin: AsyncTestClient) -> None:
    carol = await create(admin, "carol")
    assert carol["is_admin"] is False and carol["active"] is True
    assert "password" not in str(carol) and "hash" not in str(carol)
    listed = (await admin.get("/api/admin/users")).json()
    assert [u["username"] for u in listed] == ["carol", "root"]
    again = await admin.post("/api/admin/users", json={"username": "Carol", "password": PASSWORD})
    assert again.status_code == 400 and "taken" in again.json()["detail"]
    promoted = await patch(admin, carol["id"], is_admin=True)
    assert promoted.status_code == 200 and promoted.json()["is_admin"] is True


async def test_deactivating_ends_sessions_and_tokens_and_sign_in(
    admin: AsyncTestClient, database_url: str
) -> None:
    token = await make_user(database_url, "dave")
    dave = next(u for u in (await admin.get("/api/admin/users")).json() if u["username"] == "dave")
    secret = await accounts_call(database_url, "start_session", dave["id"])
    as_dave = bearer_header(token)
    assert (await admin.get("/api/conversations", headers=as_dave)).status_code == 200

    off = await patch(admin, dave["id"], active=False)
    assert off.status_code == 200 and off.json()["active"] is False
    assert (await admin.get("/api/conversations", headers=as_dave)).status_code == 401
    assert await accounts_call(database_url, "user_for_session", secret) is None
    assert await accounts_call(database_url, "authenticate", "dave", PASSWORD) is None

    on = await patch(admin, dave["id"], active=True)
    assert on.status_code == 200 and on.json()["active"] is True
    assert await accounts_call(database_url, "authenticate", "dave", PASSWORD) is not None
    # What deactivating ended stays ended.
    assert (await admin.get("/api/conversations", headers=as_dave)).status_code == 401
    assert await accounts_call(database_url, "user_for_session", secret) is None


async def test_the_last_active_admin_cannot_be_demoted_or_deactivated(
    admin: AsyncTestClient,
) -> None:
    root = next(u for u in (await admin.get("/api/admin/users")).json() if u["is_admin"])
    for change in ({"is_admin": False}, {"active": False}):
        refused = await patch(admin, root["id"], **change)
        assert refused.status_code == 409, refused.text
        assert "last active admin" in refused.json()["detail"]
    erin = await create(admin, "erin", is_admin=True)
    assert (await patch(admin, erin["id"], active=False)).status_code == 200
    # A deactivated admin does not count: root is still the last active one.
    assert (await patch(admin, root["id"], is_admin=False)).status_code == 409
    assert (await patch(admin, erin["id"], active=True)).status_code == 200
    demoted = await patch(admin, root["id"], is_admin=False)
    assert demoted.status_code == 200 and demoted.json()["is_admin"] is False
    # root is an ordinary user now: managing users is over for them.
    assert (await admin.get("/api/admin/users")).status_code == 403


async def test_a_password_reset_ends_the_users_sessions(
    admin: AsyncTestClient, database_url: str
) -> None:
    frank = await create(admin, "frank")
    secret = await accounts_call(database_url, "start_session", frank["id"])
    reset = await patch(admin, frank["id"], password="a brand new secret")
    assert reset.status_code == 200
    assert await accounts_call(database_url, "user_for_session", secret) is None
    assert await accounts_call(database_url, "authenticate", "frank", PASSWORD) is None
    assert await accounts_call(database_url, "authenticate", "frank", "a brand new secret")


@pytest.mark.parametrize(
    ("changes", "status"),
    [
        ({}, 400),
        ({"password": "short"}, 400),
        ({"is_admin": "yes"}, 400),
        ({"password": "x" * 5000}, 400),
    ],
)
async def test_bad_changes_are_clear_4xx(
    admin: AsyncTestClient, changes: dict[str, Any], status: int
) -> None:
    gina = await create(admin, "gina")
    response = await patch(admin, gina["id"], **changes)
    assert response.status_code == status, response.text
    assert response.json()["detail"]


async def test_unknown_users_and_bad_ids(admin: AsyncTestClient) -> None:
    assert (await patch(admin, 999_999, is_admin=True)).status_code == 404
    assert (await admin.patch("/api/admin/users/0", json={"is_admin": True})).status_code == 400
    huge = await admin.patch(f"/api/admin/users/{2**70}", json={"is_admin": True})
    assert huge.status_code in (400, 404)
    short = await admin.post("/api/admin/users", json={"username": "h", "password": "short"})
    assert short.status_code == 400
    bad_name = await admin.post(
        "/api/admin/users", json={"username": "no spaces allowed", "password": PASSWORD}
    )
    assert bad_name.status_code == 400
