"""Forms read strictly: bytes a form's charset cannot read, and a charset no codec has,
are the client's error (a 400, by the app's `bad_encoding` handler), never text with
U+FFFD in it stored as if it had been typed.

Litestar reads a URL-encoded body as Latin-1 and its percent-escapes as UTF-8 with
replacement, and ignores the `charset` parameter; `StrictFormRequest` reads the body in
its charset (UTF-8 unless it names another) and its escapes in the same one, strictly,
and hands Litestar the result, so the CSRF guard and the handler that read the form
after it share one reading. Multipart parts are read strictly by Litestar already; the
charset the whole body names is checked here.
"""

from __future__ import annotations

import codecs
from typing import Any
from urllib.parse import parse_qsl

from litestar import Request
from litestar.datastructures import UploadFile
from litestar.datastructures.multi_dicts import FormMultiDict
from litestar.enums import RequestEncodingType
from litestar.types import Empty

DEFAULT_CHARSET = "utf-8"


def read_url_encoded(body: bytes, charset: str) -> dict[str, str | list[str] | UploadFile]:
    """The form's fields as Litestar gives them (a name sent twice: a list), read in
    `charset` strictly: UnicodeDecodeError for bytes it cannot read, raw or escaped."""
    fields: dict[str, list[str]] = {}
    pairs = parse_qsl(
        body.decode(charset),
        keep_blank_values=True,
        separator="&",
        encoding=charset,
        errors="strict",
    )
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return {name: values if len(values) > 1 else values[0] for name, values in fields.items()}


class StrictFormRequest(Request[Any, Any, Any]):
    """The app's request class (`Litestar(request_class=...)`): `form()` refuses what its
    charset cannot read."""

    async def form(self) -> FormMultiDict:
        content_type, options = self.content_type
        if content_type not in (RequestEncodingType.URL_ENCODED, RequestEncodingType.MULTI_PART):
            return await super().form()
        charset = options.get("charset", DEFAULT_CHARSET)
        codecs.lookup(charset)  # LookupError for a charset no codec has
        state = self._connection_state
        if content_type == RequestEncodingType.URL_ENCODED and state.form is Empty:
            state.form = read_url_encoded(await self.body(), charset)
        return await super().form()
