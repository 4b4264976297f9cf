"""The id of a stored row, typed as the code that holds one knows it."""

from __future__ import annotations

from typing import Protocol


class HasRowId(Protocol):
    @property
    def id(self) -> int | None: ...


def id_of(row: HasRowId) -> int:
    """A row's id once it is in the database. SQLModel types `id` as `int | None` because
    a model built in Python has none until it is inserted; code holding a row it read back
    says so here, and a row that was never stored fails loudly instead of querying None."""
    if row.id is None:
        raise ValueError(f"this {type(row).__name__} has not been stored yet")
    return row.id
