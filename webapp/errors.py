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
    500), and SQLite would keep it where no one can see it. So is text with a lone
    surrogate (see `refuse_surrogates`)."""
    if "\x00" in text:
        raise InvalidInput(f"{what} contains a NUL character")
    return refuse_surrogates(text, what)


def refuse_surrogates(text: str, what: str) -> str:
    """Text with a lone surrogate (U+D800 to U+DFFF, half of a UTF-16 pair: no character)
    is refused: it cannot be written as UTF-8, so the database driver, a tokenizer or a
    model server would fail on it later (a 500, or a tokenizer taken for down). It comes
    from a JSON escape such as \\ud800 or a form field in an encoding that makes one."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InvalidInput(
                f"{what} contains a lone surrogate (U+{ord(text[error.start]):04X}), "
                "which is not a character"
            ) from None
    return text


class NotFound(AppError):
    """Also what a foreign id answers: someone else's conversation does not exist for you."""

    status_code = 404


class TooLarge(AppError):
    """Too large to take: a file past its size cap, or past its owner's storage quota."""

    status_code = 413


class FilesOff(AppError):
    """Files offered where they are not taken (an embed whose entry allows none)."""

    status_code = 403


class Conflict(AppError):
    status_code = 409


class TooManyRequests(AppError):
    """A rate limit: says when to try again, and nothing already stored is touched."""

    status_code = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
