"""`/embed/{name}/files`: an embed visitor's uploads, when the embed's `[[embeds]]` entry
lets visitors attach files (`files`, off by default; `max_file_bytes`).

A visitor's files are theirs (their owner key, as their conversation's), checked as any
upload is (type told by the bytes, size, the per-owner quota, read in a reader process),
limited to the kinds and size the entry allows, and each upload passes the embed's
quotas per address and per embed as a send does (`Admission.admit_upload`): a visitor who
changes cookies gets no more room. The chip and the send are the conversation pages'.
"""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, Response, Router, delete, get, post
from litestar.datastructures import UploadFile
from litestar.params import FromPath
from litestar.status_codes import HTTP_201_CREATED

from webapp.chat.files.web import MULTIPART_OVERHEAD, Files, file_dict, file_response
from webapp.chat.web.deps import Chat
from webapp.embed.pages import visitor_owner
from webapp.errors import FilesOff, InvalidInput, NotFound
from webapp.llm.catalog import EmbedSpec
from webapp.timeutil import utcnow


def _owner(request: Request[Any, Any, Any], chat: Chat, embed_name: str) -> tuple[EmbedSpec, str]:
    """The embed (404 for a name no entry has) and the visitor's owner key under it."""
    spec = chat.catalog.embeds.get(embed_name)
    if spec is None:
        raise NotFound("no such embed")
    return spec, visitor_owner(spec.name, request.scope["state"]["anchor"])


def _visitor(request: Request[Any, Any, Any], chat: Chat, embed_name: str) -> tuple[EmbedSpec, str]:
    """As `_owner`, and a 403 when the embed takes no files: uploads and deletes ask it;
    reading back does not (a file already shown stays readable)."""
    spec, owner = _owner(request, chat, embed_name)
    if not spec.file_kinds:
        raise FilesOff("this chat takes no files")
    return spec, owner


class EmbedFiles(Controller):
    path = "/embed/{embed_name:str}/files"
    opt = {"exclude_from_auth": True}  # noqa: RUF012

    @post("/", status_code=HTTP_201_CREATED)
    async def upload(
        self, request: Request[Any, Any, Any], chat: Chat, files: Files, embed_name: FromPath[str]
    ) -> dict[str, Any]:
        """A file for the visitor's next message (multipart, field `file`): 403 when the
        embed takes no files, 400 for a kind it does not take, 413 past its size."""
        spec, owner = _visitor(request, chat, embed_name)
        form = await request.form()
        upload = form.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise InvalidInput("send the file as the multipart field 'file'")
        data = await upload.read()
        address = request.client.host if request.client else ""
        await chat.db.write_core(chat.admission.admit_upload, owner, utcnow(), address)
        stored = await files.upload(
            owner,
            upload.filename,
            data,
            upload.content_type,
            kinds=spec.file_kinds,
            most=spec.max_file_bytes,
        )
        return file_dict(stored)

    @get("/{file_id:str}")
    async def download(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        files: Files,
        embed_name: FromPath[str],
        file_id: FromPath[str],
    ) -> Response[bytes]:
        """The visitor's own file (the history's thumbnails), as `GET /api/files/{id}`
        serves a user's; 404 for anyone else's."""
        _, owner = _owner(request, chat, embed_name)
        stored, data = await files.read(owner, file_id)
        return file_response(stored, data)

    @delete("/{file_id:str}", status_code=204)
    async def remove(
        self,
        request: Request[Any, Any, Any],
        chat: Chat,
        files: Files,
        embed_name: FromPath[str],
        file_id: FromPath[str],
    ) -> None:
        """A chip removed: the visitor's unused upload deleted (409 while a message uses it)."""
        _, owner = _visitor(request, chat, embed_name)
        await files.delete(owner, file_id)


def embed_files_router(max_file_bytes: int) -> Router:
    """The embed's uploads, their requests bounded to one file's size and its framing."""
    return Router(
        path="/",
        route_handlers=[EmbedFiles],
        request_max_body_size=max_file_bytes + MULTIPART_OVERHEAD,
    )
