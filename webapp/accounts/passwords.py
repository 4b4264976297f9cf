"""Password rules and Argon2id hashing.

Hashing costs about a quarter of a second of CPU and 64 MiB by design, so it
runs in a worker thread (argon2-cffi releases the GIL) instead of stalling the
event loop for every other request, and only a few run at once (one per core):
a burst of sign-ins queues instead of taking every core and 64 MiB each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
from dataclasses import dataclass

from argon2 import PasswordHasher, profiles
from argon2.exceptions import InvalidHashError, VerificationError

from webapp.errors import InvalidInput

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
"""Beyond this a password is refused outright: hashing megabytes on request is a cheap DoS."""
CHECKS_AT_ONCE = max(1, os.cpu_count() or 1)
"""Argon2 hashes or verifications running at once, per process."""


def check_password(password: str) -> None:
    """Length is counted without the spaces at either end: eight spaces are no password."""
    if len(password.strip()) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(
            f"the password must be at least {MIN_PASSWORD_LENGTH} characters long, "
            "not counting spaces at either end"
        )
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidInput(f"the password must be at most {MAX_PASSWORD_LENGTH} characters long")


def configured_hasher(hashing: str) -> PasswordHasher:
    """Today's parameters for new hashes (`hashing`: the `password_hashing` setting). A
    stored hash made with weaker ones is replaced at its next successful check."""
    if hashing == "cheapest":
        return PasswordHasher.from_parameters(profiles.CHEAPEST)
    return PasswordHasher()


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    new_hash: str | None = None
    """Set when the stored hash used weaker parameters than today's: store this one instead."""


class Passwords:
    """Hash and verify with one `PasswordHasher` (tests pass a cheap one for speed)."""

    def __init__(self, hasher: PasswordHasher, *, at_once: int = CHECKS_AT_ONCE) -> None:
        self.hasher = hasher
        self._dummy: str | None = None
        self._dummy_lock = threading.Lock()
        self._slots = asyncio.Semaphore(at_once)

    async def hash(self, password: str) -> str:
        async with self._slots:
            return await asyncio.to_thread(self.hasher.hash, password)

    async def verify(self, stored_hash: str | None, password: str) -> Verdict:
        """Check `password`; with no stored hash (no such user) still spend one verification.

        Answering "no such user" faster than "wrong password" would let anyone
        list the accounts by timing the login form.
        """
        async with self._slots:
            return await asyncio.to_thread(self._verify, stored_hash, password)

    def _verify(self, stored_hash: str | None, password: str) -> Verdict:
        if stored_hash is None:
            with contextlib.suppress(VerificationError):
                self.hasher.verify(self._dummy_hash(), password)
            return Verdict(ok=False)
        try:
            self.hasher.verify(stored_hash, password)
        except (VerificationError, InvalidHashError):
            return Verdict(ok=False)
        if self.hasher.check_needs_rehash(stored_hash):
            return Verdict(ok=True, new_hash=self.hasher.hash(password))
        return Verdict(ok=True)

    def _dummy_hash(self) -> str:
        """A hash with today's parameters: verifying against it costs what a real one does."""
        with self._dummy_lock:
            if self._dummy is None:
                self._dummy = self.hasher.hash(secrets.token_urlsafe(16))
            return self._dummy
