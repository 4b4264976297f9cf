"""Bounds on numbers that arrive in URLs, so out-of-range input is a 400, not a database error.

Row ids and sequence numbers are 64-bit signed integers in both databases: a larger value
would fail inside the driver (SQLite raises OverflowError, asyncpg a DataError), which is
a 500. Litestar checks these bounds while parsing the request and answers 400.
"""

from __future__ import annotations

from typing import Annotated

from litestar.params import Parameter

ROW_ID_MAX = 2**63 - 1

RowId = Annotated[int, Parameter(ge=1, le=ROW_ID_MAX, description="a row id")]
"""A row id in a path: 1 to 2^63 - 1."""

Seq = Annotated[int, Parameter(ge=1, le=ROW_ID_MAX, description="a message's seq")]
"""A message sequence number in a query: 1 to 2^63 - 1."""
