"""The conversation service on its own, as the app starts it, and a turn through it."""

from __future__ import annotations

from webapp.chat.jobs import ChatJobs, chat_jobs
from webapp.chat.stored.models import Message
from webapp.db import Database
from webapp.llm.calibration import Calibrator
from webapp.llm.manager import LLMManager
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


async def say(chat: ChatJobs, conversation_id: str, text: str) -> tuple[Message, Message]:
    send = await chat.sender.send(OWNER, conversation_id, text)
    return await chat.sender.settle(send)
