"""`webapp user create` and `webapp token create`: accounts from a shell.

Heavy imports (the database, argon2) happen inside the commands so that
`webapp --help` stays quick. Errors go to stderr with exit status 1; `token
create` prints nothing but the token on stdout, so `TOKEN=$(webapp token
create alice)` works. A token may do chat and the gateway unless asked for more
(`--admin-scope`, or `--scope` for exactly the scopes named); `user delete` keeps the
last active admin.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from getpass import getpass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from webapp.accounts.service import AccountService

T = TypeVar("T")

DEFAULT_TOKEN_NAME = "cli"
SCOPE_NAMES = ("chat", "gateway", "admin", "tokens", "settings")
"""As `webapp.accounts.models.SCOPES` (not imported: `webapp --help` stays quick)."""
DEFAULT_SCOPE_NAMES = ("chat", "gateway")


class CommandError(Exception):
    """A reason to stop, shown to the user as is."""


def add_user_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    user = commands.add_parser("user", help="manage user accounts")
    actions = user.add_subparsers(dest="user_command", required=True)
    create = actions.add_parser("create", help="create a user account")
    create.add_argument("name", help="username: 1-64 letters, digits or . _ - @")
    create.add_argument("--admin", action="store_true", help="make the user an administrator")
    create.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from one line of standard input instead of prompting",
    )
    create.set_defaults(run=cmd_user_create)
    remove = actions.add_parser(
        "delete", help="delete a user account with its sessions, tokens and conversations"
    )
    remove.add_argument("name", help="the username")
    remove.set_defaults(run=cmd_user_delete)


def add_token_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = commands.add_parser("token", help="manage API tokens")
    actions = token.add_subparsers(dest="token_command", required=True)
    create = actions.add_parser(
        "create", help="create an API token for a user and print it (shown only once)"
    )
    create.add_argument("name", help="the username the token acts as")
    create.add_argument(
        "--name", dest="label", default=DEFAULT_TOKEN_NAME, help="a label to recognise it by"
    )
    create.add_argument(
        "--admin-scope",
        action="store_true",
        help="let the token reach the admin pages and API too (an admin's token only)",
    )
    create.add_argument(
        "--scope",
        dest="scopes",
        action="append",
        choices=SCOPE_NAMES,
        metavar="SCOPE",
        help=(
            "what the token may do, instead of the default "
            f"({' and '.join(DEFAULT_SCOPE_NAMES)}); repeat for several: "
            + ", ".join(SCOPE_NAMES)
            + " (tokens: create and revoke tokens; settings: change preferences, custom "
            "instructions and the password)"
        ),
    )
    create.set_defaults(run=cmd_token_create)


def cmd_user_create(args: argparse.Namespace) -> int:
    try:
        password = _read_password(from_stdin=args.password_stdin)
        user = _run(lambda accounts: accounts.create_user(args.name, password, is_admin=args.admin))
    except CommandError as error:
        return _fail(str(error))
    kind = "admin user" if user.is_admin else "user"
    print(f"created {kind} {user.username!r}")
    return 0


def cmd_user_delete(args: argparse.Namespace) -> int:
    async def remove(accounts: AccountService) -> str:
        user = await accounts.get_user_by_name(args.name)
        # The last active admin is refused (a Conflict, which `_run` turns into an error).
        if user is None or user.id is None or not await accounts.delete_user(user.id):
            raise CommandError(f"no user named {args.name!r}")
        return user.username

    try:
        name = _run(remove)
    except CommandError as error:
        return _fail(str(error))
    print(f"deleted user {name!r} and everything that was theirs")
    return 0


def cmd_token_create(args: argparse.Namespace) -> int:
    async def create(accounts: AccountService) -> str:
        user = await accounts.get_user_by_name(args.name)
        if user is None or user.id is None:
            raise CommandError(f"no user named {args.name!r}")
        scopes = [*(args.scopes or DEFAULT_SCOPE_NAMES), *(["admin"] if args.admin_scope else [])]
        _, plain = await accounts.create_token(user.id, args.label, scopes)
        return plain

    try:
        token = _run(create)
    except CommandError as error:
        return _fail(str(error))
    print(token)
    return 0


def _read_password(*, from_stdin: bool) -> str:
    if from_stdin:
        line = sys.stdin.readline()
        if not line:
            raise CommandError("no password on standard input")
        return line.rstrip("\r\n")
    try:
        password = getpass("Password: ")
        again = getpass("Repeat password: ")
    except (EOFError, KeyboardInterrupt):
        raise CommandError("cancelled") from None
    if password != again:
        raise CommandError("the passwords do not match")
    return password


def _run(work: Callable[[AccountService], Awaitable[T]]) -> T:
    """Run `work` on the configured database; domain and database errors become CommandError."""
    from sqlalchemy.exc import DBAPIError

    from webapp.accounts.passwords import configured_hasher
    from webapp.accounts.service import AccountService
    from webapp.db import Database
    from webapp.errors import AppError
    from webapp.settings import Settings

    settings = Settings()

    async def main() -> T:
        db = Database(settings.database_url)
        try:
            hasher = configured_hasher(settings.password_hashing)
            return await work(AccountService(db, hasher=hasher))
        finally:
            await db.dispose()

    try:
        return asyncio.run(main())
    except AppError as error:
        raise CommandError(error.message) from None
    except DBAPIError as error:
        raise CommandError(
            f"database error ({error.orig}); is WEBAPP_DATABASE_URL right, "
            "and has `webapp migrate` been run?"
        ) from None


def _fail(reason: str) -> int:
    print(f"error: {reason}", file=sys.stderr)
    return 1
