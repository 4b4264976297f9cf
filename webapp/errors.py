"""Errors the domain raises and the web layer turns into clear 4xx answers."""

from __future__ import annotations


class AppError(Exception):
    status_code = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AppError):
    status_code = 400


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
