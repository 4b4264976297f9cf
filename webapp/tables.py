"""Every table of the app, imported in one place so Alembic and tests see the whole schema."""

from webapp.accounts.models import ApiToken, LoginSession, User
from webapp.chat.files.models import FileBlob, MessageFile, StoredFile
from webapp.chat.stored.models import Conversation, GatewayCall, Message
from webapp.embed.models import EmbedSend
from webapp.llm.calibration import ModelCalibration

__all__ = [
    "ApiToken",
    "Conversation",
    "EmbedSend",
    "FileBlob",
    "GatewayCall",
    "LoginSession",
    "Message",
    "MessageFile",
    "ModelCalibration",
    "StoredFile",
    "User",
]
