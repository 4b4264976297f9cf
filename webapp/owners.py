"""Whose a conversation is, as one string: `user:<id>` or `embed:<name>:<visitor>`.

Every look-up compares this string; the row also stores the keys it stands for
(`owner_columns`). Accounts make user owners and embeds visitor owners, and chat stores
both, so the rule sits below all three.
"""

from __future__ import annotations

from typing import TypedDict

USER_OWNER_PREFIX = "user:"
EMBED_OWNER_PREFIX = "embed:"


def user_owner(user_id: int) -> str:
    return f"{USER_OWNER_PREFIX}{user_id}"


class OwnerKeys(TypedDict, total=False):
    """The columns of a conversation row that say whose it is, besides `owner`."""

    user_id: int
    embed_name: str
    visitor: str


def owner_columns(owner: str) -> OwnerKeys:
    """The keys an owner string stands for, as the conversation row stores them: a user's
    id (a foreign key: the conversations go when the user goes, so a later account that
    gets the same id inherits nothing), or an embed's name and the visitor's digest."""
    if owner.startswith(USER_OWNER_PREFIX):
        ident = owner[len(USER_OWNER_PREFIX) :]
        if not ident.isdecimal():
            raise ValueError(f"not a user owner: {owner!r}")
        return {"user_id": int(ident)}
    if owner.startswith(EMBED_OWNER_PREFIX):
        name, _, visitor = owner[len(EMBED_OWNER_PREFIX) :].rpartition(":")
        if not name or not visitor:
            raise ValueError(f"not an embed owner: {owner!r}")
        return {"embed_name": name, "visitor": visitor}
    return {}
