"""The chat's app-wide dependencies (`create_app` provides them), named as handlers
declare them (see webapp.web.deps for why they are aliases)."""

from __future__ import annotations

from litestar.di import NamedDependency

from webapp.chat.answering.notify import AnswerNotices
from webapp.chat.jobs import ChatJobs

Chat = NamedDependency[ChatJobs]
"""This process's chat jobs (`chat`): a handler calls the one it needs by name."""

Notices = NamedDependency[AnswerNotices]
"""This process's answer notices (`notices`): how a watcher hears an answer move."""
