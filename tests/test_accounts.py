"""Accounts on SQLite and PostgreSQL: users, passwords, sessions, API tokens, the CLI."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Literal

import pytest
from argon2 import PasswordHasher
from sqlalchemy import delete, update
from sqlmodel import col, select

from tests.dbutil import session_on
from tests.factories import PASSWORD, accounts_on, run_on
from webapp.accounts.models import ApiToken, LoginSession, SignInAttempt, User
from webapp.accounts.passwords import CHECKS_AT_ONCE, Passwords, configured_hasher
from webapp.accounts.service import AccountService
from webapp.db import Database
from webapp.errors import Conflict, InvalidInput, NotFound, TooManyRequests
from webapp.settings import Settings
from webapp.stored import id_of
from webapp.timeutil import as_utc, utcnow


class CountingHasher(PasswordHasher):
    """Cheap parameters (the tests hash a lot) and a count of verifications."""

    def __init__(self, time_cost: int = 1) -> None:
        super().__init__(time_cost=time_cost, memory_cost=64, parallelism=1)
        self.verifications = 0
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        with self._lock:
            self.verifications += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(0.01)  # long enough for parallel checks to overlap if allowed to
            return super().verify(hash, password)
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
async def accounts(database_url: str) -> AsyncIterator[AccountService]:
    db = Database(database_url)
    yield AccountService(db, hasher=CountingHasher())
    await db.dispose()


async def rows(accounts: AccountService, model: type) -> list:
    async with session_on(accounts.db) as session:
        return list((await session.exec(select(model))).all())


def sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# Users and passwords


async def test_a_user_is_stored_as_given_with_an_argon2id_hash(accounts: AccountService) -> None:
    assert await accounts.has_users() is False
    user = await accounts.create_user("Alice.Smith@example", PASSWORD)
    assert await accounts.has_users() is True
    assert user.id is not None and user.username == "Alice.Smith@example"
    assert user.is_admin is False and user.last_login_at is None
    [stored] = await rows(accounts, User)
    assert stored.password_hash.startswith("$argon2id$")
    assert PASSWORD not in stored.password_hash
    assert "password_hash" not in stored.model_dump() and "argon2" not in repr(stored)
    found = await accounts.get_user(id_of(user))
    assert found is not None and found.username == "Alice.Smith@example"
    by_name = await accounts.get_user_by_name("alice.smith@EXAMPLE")
    assert by_name is not None and by_name.id == user.id
    assert await accounts.get_user_by_name("bob") is None
    assert await accounts.get_user(user.id + 1) is None


@pytest.mark.parametrize("username", ["", "x" * 65, "bob smith", "bøb", "bob/1", " bob", "a\nb"])
async def test_bad_usernames_are_refused(accounts: AccountService, username: str) -> None:
    with pytest.raises(InvalidInput, match="username must be 1 to 64 characters"):
        await accounts.create_user(username, PASSWORD)
    assert await accounts.has_users() is False


async def test_short_passwords_are_refused_and_the_limits_are_inclusive(
    accounts: AccountService,
) -> None:
    with pytest.raises(InvalidInput, match="at least 8 characters"):
        await accounts.create_user("bob", "1234567")
    with pytest.raises(InvalidInput, match="at least 8 characters"):
        await accounts.create_first_admin("bob", "")
    await accounts.create_user("b" * 64, "12345678")
    await accounts.create_user("._-@", "12345678")
    assert len(await accounts.list_users()) == 2


async def test_a_username_taken_in_any_letter_case_is_refused(accounts: AccountService) -> None:
    await accounts.create_user("alice", PASSWORD)
    with pytest.raises(InvalidInput, match="'ALICE' is already taken"):
        await accounts.create_user("ALICE", PASSWORD)
    assert [u.username for u in await accounts.list_users()] == ["alice"]


async def test_simultaneous_sign_ups_for_one_name_make_one_account(
    accounts: AccountService,
) -> None:
    names = ["carol", "Carol", "CAROL", "caRol", "carOL"]
    results = await asyncio.gather(
        *(accounts.create_user(name, PASSWORD) for name in names), return_exceptions=True
    )
    created = [r for r in results if isinstance(r, User)]
    refused = [r for r in results if isinstance(r, InvalidInput)]
    assert len(created) == 1 and len(refused) == 4, results
    assert len(await accounts.list_users()) == 1


async def test_users_are_listed_by_name_ignoring_case(accounts: AccountService) -> None:
    for name in ("carol", "Bob", "alice"):
        await accounts.create_user(name, PASSWORD)
    assert [u.username for u in await accounts.list_users()] == ["alice", "Bob", "carol"]


async def test_authenticate_accepts_the_password_in_any_username_case(
    accounts: AccountService,
) -> None:
    user = await accounts.create_user("Alice", PASSWORD)
    before = utcnow()
    signed_in = await accounts.authenticate("aLICE", PASSWORD)
    assert signed_in is not None and signed_in.id == user.id
    assert signed_in.last_login_at is not None and signed_in.last_login_at >= before
    stored = await accounts.get_user(id_of(user))
    assert stored is not None and stored.last_login_at is not None
    assert as_utc(stored.last_login_at) >= before


async def test_wrong_password_and_unknown_user_both_give_none_at_the_same_cost(
    accounts: AccountService,
) -> None:
    hasher = accounts.passwords.hasher
    assert isinstance(hasher, CountingHasher)
    await accounts.create_user("alice", PASSWORD)
    hasher.verifications = 0
    assert await accounts.authenticate("alice", PASSWORD + "!") is None
    assert hasher.verifications == 1
    # No such user: still one full verification. A name no account can have: none (the
    # rule is public, so answering at once tells nothing).
    assert await accounts.authenticate("mallory", PASSWORD) is None
    assert hasher.verifications == 2
    assert await accounts.authenticate("not a name", PASSWORD) is None
    assert hasher.verifications == 2
    assert await accounts.authenticate("alice", "") is None
    assert await accounts.authenticate("alice", "x" * 100_000) is None
    [stored] = await rows(accounts, User)
    assert stored.last_login_at is None


async def test_a_hash_with_weaker_parameters_is_replaced_on_sign_in(
    accounts: AccountService,
) -> None:
    await accounts.create_user("alice", PASSWORD)
    [before] = await rows(accounts, User)
    stronger = AccountService(accounts.db, hasher=CountingHasher(time_cost=2))
    assert await stronger.authenticate("alice", PASSWORD) is not None
    [after] = await rows(accounts, User)
    assert after.password_hash != before.password_hash
    assert ",t=2," in after.password_hash and after.password_hash.startswith("$argon2id$")
    assert await stronger.authenticate("alice", PASSWORD) is not None
    [again] = await rows(accounts, User)
    assert again.password_hash == after.password_hash


STANDARD = "$argon2id$v=19$m=65536,t=3,p=4$"


async def test_hashes_cost_the_standard_unless_a_setting_says_cheapest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test runs hash at the cheapest cost (tests/conftest.py); a deployment hashes
    at argon2's standard one, and replaces a cheaper hash at its next check."""
    monkeypatch.delenv("WEBAPP_PASSWORD_HASHING", raising=False)
    standard = configured_hasher(Settings().password_hashing)  # the environment's setting
    assert (await Passwords(standard).hash(PASSWORD)).startswith(STANDARD)
    monkeypatch.setenv("WEBAPP_PASSWORD_HASHING", "cheapest")
    cheap = await Passwords(configured_hasher(Settings().password_hashing)).hash(PASSWORD)
    assert cheap.startswith("$argon2id$v=19$m=8,t=1,p=1$")
    verdict = await Passwords(configured_hasher("standard")).verify(cheap, PASSWORD)
    assert verdict.ok and verdict.new_hash is not None and verdict.new_hash.startswith(STANDARD)


# The first admin


async def test_the_first_admin_can_be_made_only_while_there_are_no_users(
    accounts: AccountService,
) -> None:
    admin = await accounts.create_first_admin("root", PASSWORD)
    assert admin.id is not None and admin.is_admin is True and admin.username == "root"
    assert admin.password_hash.startswith("$argon2id$")
    assert await accounts.authenticate("root", PASSWORD) is not None
    with pytest.raises(Conflict):
        await accounts.create_first_admin("other", PASSWORD)
    assert [u.username for u in await accounts.list_users()] == ["root"]


async def test_no_first_admin_once_an_ordinary_user_exists(accounts: AccountService) -> None:
    await accounts.create_user("alice", PASSWORD)
    with pytest.raises(Conflict):
        await accounts.create_first_admin("root", PASSWORD)


async def test_concurrent_first_admins_make_exactly_one(accounts: AccountService) -> None:
    results = await asyncio.gather(
        *(accounts.create_first_admin(f"admin{i}", PASSWORD) for i in range(5)),
        return_exceptions=True,
    )
    created = [r for r in results if isinstance(r, User)]
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(created) == 1 and len(refused) == 4, results
    users = await accounts.list_users()
    assert [u.id for u in users] == [created[0].id] and users[0].is_admin


# Browser sessions


async def test_a_session_secret_signs_in_and_only_its_digest_is_stored(
    accounts: AccountService,
) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    secret = await accounts.start_session(id_of(user))
    assert len(secret) >= 40
    signed_in = await accounts.user_for_session(secret)
    assert signed_in is not None and signed_in.id == user.id
    [login] = await rows(accounts, LoginSession)
    assert login.id == sha256(secret) and secret not in login.model_dump_json()
    assert as_utc(login.expires_at) - as_utc(login.created_at) == timedelta(days=14)
    for wrong in ("", "x", sha256(secret), secret + "x", "y" * 10_000):
        assert await accounts.user_for_session(wrong) is None


async def test_a_session_ends_on_sign_out(accounts: AccountService) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    secret = await accounts.start_session(id_of(user))
    other = await accounts.start_session(id_of(user))
    await accounts.end_session(secret)
    await accounts.end_session(secret)  # twice is fine
    await accounts.end_session("never issued")
    assert await accounts.user_for_session(secret) is None
    assert await accounts.user_for_session(other) is not None


async def test_an_expired_session_gives_none_and_is_purged(accounts: AccountService) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    assert user.id is not None
    expired = await accounts.start_session(user.id, lifetime=timedelta(0))
    aged = await accounts.start_session(user.id)
    live = await accounts.start_session(user.id, lifetime=timedelta(hours=1))
    async with session_on(accounts.db, begin=True) as session:
        await session.exec(
            update(LoginSession)
            .where(col(LoginSession.id) == sha256(aged))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert await accounts.user_for_session(expired) is None
    assert await accounts.user_for_session(aged) is None
    assert await accounts.user_for_session(live) is not None
    assert await accounts.purge_expired_sessions() == 2
    assert [login.id for login in await rows(accounts, LoginSession)] == [sha256(live)]
    assert await accounts.purge_expired_sessions() == 0


async def test_last_seen_is_written_at_most_once_a_minute(accounts: AccountService) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    secret = await accounts.start_session(id_of(user))
    [started] = await rows(accounts, LoginSession)
    await accounts.user_for_session(secret)
    [unchanged] = await rows(accounts, LoginSession)
    assert unchanged.last_seen_at == started.last_seen_at
    long_ago = utcnow() - timedelta(minutes=5)
    async with session_on(accounts.db, begin=True) as session:
        await session.exec(update(LoginSession).values(last_seen_at=long_ago))
    before = utcnow()
    await accounts.user_for_session(secret)
    [touched] = await rows(accounts, LoginSession)
    assert as_utc(touched.last_seen_at) >= before


async def test_sessions_and_tokens_need_an_existing_user(accounts: AccountService) -> None:
    with pytest.raises(NotFound):
        await accounts.start_session(999)
    with pytest.raises(NotFound):
        await accounts.create_token(999, "ci")


async def test_deleting_a_user_deletes_their_sessions_and_tokens(
    accounts: AccountService,
) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    assert user.id is not None
    secret = await accounts.start_session(user.id)
    _, token = await accounts.create_token(user.id, "ci")
    async with session_on(accounts.db, begin=True) as session:
        await session.exec(delete(User).where(col(User.id) == user.id))
    assert await rows(accounts, LoginSession) == [] and await rows(accounts, ApiToken) == []
    assert await accounts.user_for_session(secret) is None
    assert await accounts.user_for_token(token) is None


# API tokens


async def test_a_token_is_shown_once_and_stored_as_a_digest(accounts: AccountService) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    assert user.id is not None
    token, plain = await accounts.create_token(user.id, "  laptop script ")
    assert plain.startswith("wa_") and len(plain) == 3 + 43
    assert token.name == "laptop script" and token.prefix == plain[:8]
    assert token.revoked is False and token.last_used_at is None
    [stored] = await rows(accounts, ApiToken)
    assert stored.token_hash == sha256(plain)
    assert plain not in stored.model_dump_json()
    [listed] = await accounts.list_tokens(user.id)
    assert listed.id == token.id and plain not in listed.model_dump_json()
    _, second = await accounts.create_token(user.id, "laptop script")
    assert second != plain


async def test_a_token_authenticates_its_owner_and_records_its_use(
    accounts: AccountService,
) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    assert user.id is not None
    _, plain = await accounts.create_token(user.id, "ci")
    before = utcnow()
    owner = await accounts.user_for_token(plain)
    assert owner is not None and owner.id == user.id
    [used] = await accounts.list_tokens(user.id)
    assert used.last_used_at is not None and as_utc(used.last_used_at) >= before
    await accounts.user_for_token(plain)
    [again] = await accounts.list_tokens(user.id)
    assert again.last_used_at == used.last_used_at  # not rewritten within the minute
    for wrong in ("", plain[:-1], plain + "x", "wa_", sha256(plain), plain.upper()):
        assert await accounts.user_for_token(wrong) is None


async def test_bad_token_names_are_refused(accounts: AccountService) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    for name in ("", "   ", "x" * 101):
        with pytest.raises(InvalidInput, match="token name"):
            await accounts.create_token(id_of(user), name)


async def test_a_revoked_token_gives_none_and_is_listed_as_revoked(
    accounts: AccountService,
) -> None:
    user = await accounts.create_user("alice", PASSWORD)
    assert user.id is not None
    old, old_plain = await accounts.create_token(user.id, "old")
    _, new_plain = await accounts.create_token(user.id, "new")
    assert await accounts.revoke_token(id_of(user), id_of(old)) is True
    assert await accounts.user_for_token(old_plain) is None
    assert await accounts.user_for_token(new_plain) is not None
    listed = await accounts.list_tokens(user.id)
    assert [(t.name, t.revoked) for t in listed] == [("new", False), ("old", True)]
    revoked_at = listed[1].revoked_at
    assert await accounts.revoke_token(id_of(user), id_of(old)) is True
    assert (await accounts.list_tokens(user.id))[1].revoked_at == revoked_at


async def test_another_users_token_cannot_be_revoked(accounts: AccountService) -> None:
    alice = await accounts.create_user("alice", PASSWORD)
    bob = await accounts.create_user("bob", PASSWORD)
    assert alice.id is not None and bob.id is not None
    token, plain = await accounts.create_token(alice.id, "ci")
    assert await accounts.revoke_token(id_of(bob), id_of(token)) is False
    assert await accounts.revoke_token(bob.id, 9999) is False
    assert await accounts.list_tokens(bob.id) == []
    owner = await accounts.user_for_token(plain)
    assert owner is not None and owner.id == alice.id
    [listed] = await accounts.list_tokens(alice.id)
    assert listed.revoked is False


# The command line


def test_cli_creates_a_user_and_a_token_that_the_service_accepts(sqlite_url: str) -> None:
    created = run_on(
        sqlite_url, "user", "create", "Dave", "--admin", "--password-stdin", stdin=PASSWORD + "\n"
    )
    assert created.returncode == 0, created.stderr
    assert "created admin user 'Dave'" in created.stdout

    duplicate = run_on(
        sqlite_url, "user", "create", "dave", "--password-stdin", stdin=PASSWORD + "\n"
    )
    assert duplicate.returncode == 1
    assert "already taken" in duplicate.stderr and duplicate.stdout == ""

    issued = run_on(sqlite_url, "token", "create", "DAVE", "--name", "deploy")
    assert issued.returncode == 0, issued.stderr
    token = issued.stdout.strip()
    assert issued.stdout == token + "\n" and token.startswith("wa_")

    async def check() -> None:
        async with accounts_on(sqlite_url) as accounts:
            user = await accounts.user_for_token(token)
            assert user is not None and user.username == "Dave" and user.is_admin
            assert await accounts.authenticate("dave", PASSWORD) is not None
            [listed] = await accounts.list_tokens(id_of(user))
            assert listed.name == "deploy"

    asyncio.run(check())


def test_cli_says_why_it_failed(sqlite_url: str) -> None:
    unknown = run_on(sqlite_url, "token", "create", "nobody")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "no user named 'nobody'" in unknown.stderr

    short = run_on(sqlite_url, "user", "create", "erin", "--password-stdin", stdin="short\n")
    assert short.returncode == 1 and "at least 8 characters" in short.stderr

    empty = run_on(sqlite_url, "user", "create", "erin", "--password-stdin", stdin="")
    assert empty.returncode == 1 and "no password" in empty.stderr

    bad_name = run_on(
        sqlite_url, "user", "create", "erin smith", "--password-stdin", stdin=PASSWORD + "\n"
    )
    assert bad_name.returncode == 1 and "username must be" in bad_name.stderr


def test_cli_on_an_unmigrated_database_points_at_migrate(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    result = run_on(url, "token", "create", "alice")
    assert result.returncode == 1 and "webapp migrate" in result.stderr


async def test_failed_sign_ins_throttle_the_username_before_any_password_is_checked(
    accounts: AccountService,
) -> None:
    await accounts.create_user("alice", PASSWORD)
    hasher = accounts.passwords.hasher
    assert isinstance(hasher, CountingHasher)
    for _ in range(5):
        assert await accounts.authenticate("Alice", "not the password") is None
    checked = hasher.verifications
    with pytest.raises(TooManyRequests) as refused:
        await accounts.authenticate("alice", PASSWORD)
    assert hasher.verifications == checked, "a throttled attempt costs no Argon2 at all"
    assert 14 * 60 < refused.value.retry_after <= 15 * 60
    assert "try again in 15 minutes" in refused.value.message
    # Unknown names are throttled alike (the throttle tells nothing of who exists);
    # other names are not affected.
    for _ in range(5):
        assert await accounts.authenticate("nobody", PASSWORD) is None
    with pytest.raises(TooManyRequests):
        await accounts.authenticate("nobody", PASSWORD)
    assert await accounts.authenticate("bob", PASSWORD) is None

    # Once the failures are older than the window, the password works again and the
    # slate is cleaned.
    async with session_on(accounts.db, begin=True) as session:
        await session.exec(
            update(SignInAttempt).values(attempted_at=utcnow() - timedelta(minutes=16))
        )
    assert await accounts.authenticate("alice", PASSWORD) is not None
    assert "alice" not in {f.username_key for f in await rows(accounts, SignInAttempt)}
    # The next failure forgets every failure that has left the window.
    assert await accounts.authenticate("bob", "still wrong") is None
    assert [f.username_key for f in await rows(accounts, SignInAttempt)] == ["bob"]


async def test_a_successful_sign_in_forgets_earlier_failures(accounts: AccountService) -> None:
    await accounts.create_user("carol", PASSWORD)
    for _ in range(4):
        assert await accounts.authenticate("carol", "wrong password") is None
    assert await accounts.authenticate("carol", PASSWORD) is not None
    for _ in range(4):
        assert await accounts.authenticate("carol", "wrong password") is None
    assert await accounts.authenticate("carol", PASSWORD) is not None


async def test_absurd_usernames_fail_like_any_other(accounts: AccountService) -> None:
    """No account can have such a name: refused at once, and nothing is stored."""
    for name in ("x" * 5000, "nul\x00byte", "spaced name", ""):
        assert await accounts.authenticate(name, PASSWORD) is None
    assert await rows(accounts, SignInAttempt) == []


async def test_one_clients_failures_do_not_lock_the_owner_out(accounts: AccountService) -> None:
    await accounts.create_user("dora", PASSWORD)
    for _ in range(5):
        assert await accounts.authenticate("dora", "guess", client="203.0.113.9") is None
    with pytest.raises(TooManyRequests):
        await accounts.authenticate("dora", PASSWORD, client="203.0.113.9")
    assert await accounts.authenticate("dora", PASSWORD, client="198.51.100.7") is not None


async def test_parallel_attempts_cannot_slip_past_the_limit(accounts: AccountService) -> None:
    await accounts.create_user("erin", PASSWORD)
    hasher = accounts.passwords.hasher
    assert isinstance(hasher, CountingHasher)
    before = hasher.verifications
    outcomes = await asyncio.gather(
        *(accounts.authenticate("erin", f"guess {n}") for n in range(20)),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, TooManyRequests)]
    assert len(refused) == 15 and hasher.verifications - before == 5


async def test_impossible_usernames_cost_no_password_check(accounts: AccountService) -> None:
    hasher = accounts.passwords.hasher
    assert isinstance(hasher, CountingHasher)
    before = hasher.verifications
    outcomes = await asyncio.gather(
        *(accounts.authenticate(f"no such name {n}!", PASSWORD) for n in range(40))
    )
    assert outcomes == [None] * 40 and hasher.verifications == before


async def test_only_a_few_password_checks_run_at_once(accounts: AccountService) -> None:
    hasher = accounts.passwords.hasher
    assert isinstance(hasher, CountingHasher)
    await asyncio.gather(
        *(accounts.authenticate(f"nobody{n}", PASSWORD, client=f"10.0.0.{n}") for n in range(12))
    )
    assert hasher.verifications >= 12
    assert 1 <= hasher.most_at_once <= CHECKS_AT_ONCE
