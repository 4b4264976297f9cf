"""Every table of the app, imported in one place so Alembic and tests see the whole schema."""

from webapp.accounts.models import ApiToken, LoginSession, User
from webapp.chat.files.models import FileBlob, MessageFile, StoredFile
from webapp.chat.stored.models import Conversation, GatewayCall, Message, Summary
from webapp.chat.stored.organising import ConversationTag
from webapp.chat.stored.presets import Preset
from webapp.chat.stored.shares import Share
from webapp.embed.models import EmbedSend
from webapp.llm.calibration import CallerCalibration, ModelCalibration

__all__ = [
    "ApiToken",
    "CallerCalibration",
    "Conversation",
    "ConversationTag",
    "EmbedSend",
    "FileBlob",
    "GatewayCall",
    "LoginSession",
    "Message",
    "MessageFile",
    "ModelCalibration",
    "Preset",
    "Share",
    "StoredFile",
    "Summary",
    "User",
]
