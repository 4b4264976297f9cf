"""Request parameters as handlers declare them, each marked with where it comes from.

Litestar 3 stops guessing: a parameter without a marker, a dependency without
`NamedDependency` and a `data` without a body marker are refused there (and warned
about in 2.x). The markers here are the app's shared ones.

Numbers that arrive in URLs are bounded, so out-of-range input is a 400, not a database
error: row ids and sequence numbers are 64-bit signed integers in both databases, and a
larger value would fail inside the driver (SQLite raises OverflowError, asyncpg a
DataError), which is a 500. Litestar checks these bounds while parsing the request.
"""

from __future__ import annotations

from typing import Annotated

from litestar.params import PathParameter, QueryParameter

ROW_ID_MAX = 2**63 - 1

RowId = Annotated[int, PathParameter(ge=1, le=ROW_ID_MAX, description="a row id")]
"""A row id in a path: 1 to 2^63 - 1."""

OptionalRowIdQuery = Annotated[
    int | None, QueryParameter(ge=1, le=ROW_ID_MAX, description="a row id")
]
"""A row id in a query, left out by default (the marker must wrap the `| None`: Litestar
does not see one inside a union)."""

Seq = Annotated[int, QueryParameter(ge=1, le=ROW_ID_MAX, description="a message's seq")]
"""A message sequence number in a query: 1 to 2^63 - 1."""
