"""Per-model learning from what providers report: the estimate's factor and the
template overhead of exact counts.

Two things are learned per model, both from each answer's reported prompt_tokens:

* the estimate's factor. The raw estimate errs high against cl100k, but a
  model's own tokenizer may count more (code on Gemma) or far less (Hindi on
  Gemma is a ninth of the estimate). The factor rises at once when we
  undercounted (an undercount is what makes a provider refuse a prompt) and
  creeps down slowly when we overcounted, within [MIN_FACTOR, MAX_FACTOR]: one
  odd reading must neither starve every later send of history nor let the
  estimate fall far under.
* the per-message overhead of the chat template, for models counted exactly by
  their own tokenizer (which counts content only): what the provider counted
  beyond the content, per message. It rises at once and falls slowly, too.

Both are stored, so a restart keeps what was learned.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime

from sqlalchemy import Column, DateTime
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Field, Session, SQLModel, select

from webapp.db import Database
from webapp.llm.window import SAFETY_FRACTION
from webapp.timeutil import utcnow

log = logging.getLogger(__name__)

MIN_FACTOR = 0.35
"""About the estimate's largest over-count of any script against a real vocabulary."""
MAX_FACTOR = 4.0
DEFAULT_OVERHEAD = 8
"""Template tokens per message until learned: more than ChatML (5), Llama 3 (5) or
Gemma (6) use, so an unlearned model errs high."""
MAX_OVERHEAD = 64
MARGIN = 1.05
"""Learned factors sit a little above the observed ratio: the next prompt may be denser."""
DECAY = 0.1
"""How far one overcounting observation moves the factor down toward the observed ratio."""
BLIND_TIGHTENING = 1.25
"""Used when a provider refuses a prompt as too long without saying how long it was."""


class ModelCalibration(SQLModel, table=True):
    __tablename__ = "model_calibration"

    model: str = Field(primary_key=True, max_length=100)
    factor: float = 1.0
    samples: int = 0
    message_overhead: float | None = None
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )


def _clamp(factor: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, factor))


def _learned(current: float, target: float) -> float:
    """Up at once, down by a tenth of the way: the rule both learned values follow."""
    return target if target > current else current + DECAY * (target - current)


class Calibrator:
    """The factors in memory, written through to the database when they change."""

    def __init__(self, db: Database | None = None) -> None:
        self._db = db
        self._factors: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._overheads: dict[str, float] = {}
        self._storing: set[str] = set()
        self._stale: set[str] = set()

    def factor(self, model: str) -> float:
        return self._factors.get(model, 1.0)

    def overhead(self, model: str) -> int:
        """Template tokens per message to add to exact content counts."""
        return math.ceil(self._overheads.get(model, DEFAULT_OVERHEAD))

    async def load(self) -> None:
        if self._db is None:
            return
        rows = await self._db.read(lambda session: list(session.exec(select(ModelCalibration))))
        for row in rows:
            self._factors[row.model] = _clamp(row.factor)
            self._samples[row.model] = row.samples
            if row.message_overhead is not None:
                self._overheads[row.model] = row.message_overhead

    async def observe(self, model: str, raw_estimate: int, prompt_tokens: int) -> float:
        """Learn from one answer: the provider counted `prompt_tokens` for what we put at
        `raw_estimate`."""
        if raw_estimate <= 0 or prompt_tokens <= 0:
            return self.factor(model)
        target = prompt_tokens / raw_estimate * MARGIN
        return await self._set(model, _clamp(_learned(self.factor(model), target)))

    async def observe_overhead(
        self, model: str, counted_tokens: int, messages: int, prompt_tokens: int, fixed: int
    ) -> int:
        """Learn the template overhead: the provider counted `prompt_tokens` for `messages`
        messages whose content its tokenizer put at `counted_tokens`, plus `fixed` tokens
        (reply priming) that are not per message."""
        if messages <= 0 or prompt_tokens <= 0:
            return self.overhead(model)
        observed = max(0.0, (prompt_tokens - counted_tokens - fixed) / messages)
        current = self._overheads.get(model, DEFAULT_OVERHEAD)
        new = min(float(MAX_OVERHEAD), _learned(current, observed + 0.5))
        if abs(new - current) > 1e-3:
            self._overheads[model] = new
            await self._store(model)
        return self.overhead(model)

    async def tighten_overhead(self, model: str) -> int:
        """An exactly counted prompt was still refused: the template costs more than we
        thought. Double the overhead (bounded) so the re-fit lands inside."""
        current = self._overheads.get(model, DEFAULT_OVERHEAD)
        self._overheads[model] = min(float(MAX_OVERHEAD), max(current * 2, current + 4))
        await self._store(model)
        return self.overhead(model)

    async def tighten(
        self,
        model: str,
        raw_estimate: int,
        prompt_tokens: int | None = None,
        *,
        limit: int | None = None,
        budget: int | None = None,
        reserve: int = 0,
    ) -> float:
        """The provider refused a prompt as too long: count more from now on.

        When the refusal names the prompt's size, the factor jumps to the observed
        ratio; when it also names a limit smaller than the window we believed, the
        factor absorbs that too, so the next fit lands inside the real limit.
        """
        current = self.factor(model)
        ratio = prompt_tokens / raw_estimate if prompt_tokens and raw_estimate > 0 else None
        target = current * BLIND_TIGHTENING if ratio is None else ratio * MARGIN
        if limit and budget and ratio is not None:
            real_budget = limit - reserve - math.ceil(limit * SAFETY_FRACTION)
            if 0 < real_budget < budget:
                target = ratio * budget / real_budget * MARGIN
        new = _clamp(max(current * 1.1, target))
        log.warning("context length exceeded on %s: calibration %.3f -> %.3f", model, current, new)
        return await self._set(model, new)

    async def _set(self, model: str, factor: float) -> float:
        changed = abs(factor - self.factor(model)) > 1e-3
        self._samples[model] = self._samples.get(model, 0) + 1
        if not changed:
            return self.factor(model)
        self._factors[model] = factor
        await self._store(model)
        return factor

    async def _store(self, model: str) -> None:
        """Write the model's values through, one write per model at a time: answers that
        finish together each change the values, and while one write is on its way the
        others only mark it stale, so one more write takes the newest values for all of
        them (one transaction on SQLite's one writer, not one per answer)."""
        if self._db is None:
            return
        if model in self._storing:
            self._stale.add(model)
            return
        self._storing.add(model)
        try:
            while True:
                self._stale.discard(model)
                await self._db.write(self._write, model)
                if model not in self._stale:
                    return
        finally:
            self._storing.discard(model)

    def _write(self, session: Session, model: str) -> None:
        """One upsert: answers of one model finish together, and on PostgreSQL their
        transactions run side by side; a read-then-insert would let two of them insert
        the same new row."""
        values = {
            "model": model,
            "factor": self.factor(model),
            "samples": self._samples.get(model, 0),
            "message_overhead": self._overheads.get(model),
            "updated_at": utcnow(),
        }
        connection = session.connection()
        postgres = connection.dialect.name == "postgresql"
        statement = (postgresql_insert if postgres else sqlite_insert)(ModelCalibration)
        statement = statement.values(values)
        connection.execute(
            statement.on_conflict_do_update(
                index_elements=["model"],
                set_={key: statement.excluded[key] for key in values if key != "model"},
            )
        )
