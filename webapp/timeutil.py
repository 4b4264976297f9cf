"""One clock for the whole app: aware UTC datetimes, whatever the database gives back."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite returns naive datetimes for what was stored as UTC; make them aware again."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
