"""Per-model calibration of the token estimate, learned from what providers report.

The raw estimate errs high against common tokenizers, but a model's own
tokenizer may count more. Each answer's reported prompt_tokens against our raw
estimate tells us by how much; the factor rises at once when we undercounted
(an undercount is what makes a provider refuse a prompt) and creeps down
slowly when we overcount. It never goes below 1.0 (the estimator is already
fitted to err high) nor above MAX_FACTOR (one odd reading must not starve every
later send of history). Factors are stored, so a restart keeps what was learned.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime

from sqlalchemy import Column, DateTime
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import Field, SQLModel, select
from sqlmodel.ext.asyncio.session import AsyncSession

from webapp.llm.window import SAFETY_FRACTION
from webapp.timeutil import utcnow

log = logging.getLogger(__name__)

MIN_FACTOR = 1.0
MAX_FACTOR = 3.0
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
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )


def _clamp(factor: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, factor))


class Calibrator:
    """The factors in memory, written through to the database when they change."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession] | None = None) -> None:
        self._sessions = sessions
        self._factors: dict[str, float] = {}
        self._samples: dict[str, int] = {}

    def factor(self, model: str) -> float:
        return self._factors.get(model, MIN_FACTOR)

    async def load(self) -> None:
        if self._sessions is None:
            return
        async with self._sessions() as session:
            for row in await session.exec(select(ModelCalibration)):
                self._factors[row.model] = _clamp(row.factor)
                self._samples[row.model] = row.samples

    async def observe(self, model: str, raw_estimate: int, prompt_tokens: int) -> float:
        """Learn from one answer: the provider counted `prompt_tokens` for what we put at
        `raw_estimate`."""
        if raw_estimate <= 0 or prompt_tokens <= 0:
            return self.factor(model)
        current = self.factor(model)
        target = prompt_tokens / raw_estimate * MARGIN
        new = target if target > current else current + DECAY * (target - current)
        return await self._set(model, _clamp(new))

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
        if self._sessions is not None:
            async with self._sessions() as session, session.begin():
                row = await session.get(ModelCalibration, model)
                if row is None:
                    row = ModelCalibration(model=model)
                row.factor = factor
                row.samples = self._samples[model]
                row.updated_at = utcnow()
                session.add(row)
        return factor
