"""The conversation service on its own, as the app starts it, and a turn through it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from webapp.chat.jobs import ChatJobs, chat_jobs
from webapp.chat.stored.models import Message
from webapp.db import Database
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import load_catalog
from webapp.llm.discovery import discover
from webapp.llm.manager import LLMManager
from webapp.llm.tokenizers import Tokenizers
from webapp.settings import Settings

OWNER = "alice"
"""Who owns the conversations of the service tests."""


async def build_service(settings: Settings) -> ChatJobs:
    db = Database(settings.database_url)
    calibrator = Calibrator(db)
    await calibrator.load()
    return chat_jobs(db, LLMManager(settings.catalog, calibrator), settings)


async def close_service(service: ChatJobs) -> None:
    await service.shutdown()
    await service.manager.aclose()
    await service.db.dispose()


@asynccontextmanager
async def probed_service(
    settings: Settings, *, discover_windows: bool = False
) -> AsyncIterator[ChatJobs]:
    """The service as the app starts it for the tests of counting and windows: the windows
    the catalog file leaves out discovered (when asked), the tokenizers probed against
    the engines, the calibration loaded."""
    catalog = load_catalog(settings.config)
    if discover_windows:
        catalog, _ = await discover(catalog)
    tokenizers = Tokenizers()
    await tokenizers.probe(catalog)
    db = Database(settings.database_url)
    calibrator = Calibrator(db)
    await calibrator.load()
    chat = chat_jobs(db, LLMManager(catalog, calibrator, tokenizers=tokenizers), settings)
    try:
        yield chat
    finally:
        await close_service(chat)
        await tokenizers.aclose()


async def say(chat: ChatJobs, conversation_id: str, text: str) -> tuple[Message, Message]:
    send = await chat.sender.send(OWNER, conversation_id, text)
    return await chat.sender.settle(send)
