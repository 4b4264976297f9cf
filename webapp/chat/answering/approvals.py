"""Tool calls waiting for their owner's Allow or Deny, in this process.

A server with `approval = "always"` runs no call before the conversation's owner has
said yes. The answer's task asks here (`ask`) and awaits a future, so the event loop goes
on; `decide` (the owner's POST) settles it. No answer waits forever: past its timeout a
call counts as denied, like a Stop (the task cancelled) ends the wait.

Decided calls are kept until their answer ends (`forget`), so a second decision on the
same call is told apart from a call that never waited (409, not 404). What is kept grows
with the answer's calls, which its `max_tool_steps` bounds, and goes with the answer.
"""

from __future__ import annotations

import asyncio
from typing import Literal

Decision = Literal["allowed", "denied", "expired"]


class UnknownCall(LookupError):
    """No call of that id waits or waited for a decision in that answer, here."""


class AlreadyDecided(Exception):
    """The call was decided (or its wait expired) before this decision."""


class Approvals:
    """The calls waiting here, by answer id then call id."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, asyncio.Future[bool]]] = {}

    async def ask(self, answer_id: int, call_id: str, timeout: float) -> Decision:
        """Wait (at most `timeout` seconds) for the owner's decision on the call."""
        decided: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._calls.setdefault(answer_id, {})[call_id] = decided
        try:
            async with asyncio.timeout(timeout):
                return "allowed" if await asyncio.shield(decided) else "denied"
        except TimeoutError:
            return "expired"
        finally:
            if not decided.done():
                decided.cancel()  # expired or stopped: a late decision is a conflict

    def waiting(self, answer_id: int) -> bool:
        """Whether the answer has a call waiting for a decision here now."""
        return any(not future.done() for future in self._calls.get(answer_id, {}).values())

    def knows(self, answer_id: int) -> bool:
        """Whether the answer asked here at all (it is written by this process)."""
        return answer_id in self._calls

    def decide(self, answer_id: int, call_id: str, approve: bool) -> None:
        """Settle the call's wait: UnknownCall, or AlreadyDecided when it is over."""
        decided = self._calls.get(answer_id, {}).get(call_id)
        if decided is None:
            raise UnknownCall(call_id)
        if decided.done():
            raise AlreadyDecided(call_id)
        decided.set_result(approve)

    def heard(self, answer_id: int, call_id: str, approve: bool) -> None:
        """A decision another worker forwarded (`notify.APPROVE`): applied if the call
        waits here; otherwise it is not this process's, or was decided here first."""
        decided = self._calls.get(answer_id, {}).get(call_id)
        if decided is not None and not decided.done():
            decided.set_result(approve)

    def forget(self, answer_id: int) -> None:
        """The answer ended: its calls go (and any still waiting is ended)."""
        for future in self._calls.pop(answer_id, {}).values():
            if not future.done():
                future.cancel()

    def __len__(self) -> int:
        return sum(map(len, self._calls.values()))
