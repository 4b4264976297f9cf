"""Errors the domain raises and the web layer turns into clear 4xx answers."""

from __future__ import annotations


class AppError(Exception):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AppError):
    status_code = 400


def refuse_nul(text: str, what: str) -> str:
    """Text with a NUL character is refused wherever it would be stored or queried:
    PostgreSQL cannot hold one in a text column at all (the driver fails, which would be a
    500), and SQLite would keep it where no one can see it."""
    if "\x00" in text:
        raise InvalidInput(f"{what} contains a NUL character")
    return text


class NotFound(AppError):
    """Also what a foreign id answers: someone else's conversation does not exist for you."""

    status_code = 404


class Conflict(AppError):
    status_code = 409


class TooManyRequests(AppError):
    """A rate limit: says when to try again, and nothing already stored is touched."""

    status_code = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
