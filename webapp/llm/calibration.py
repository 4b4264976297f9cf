"""Per-model learning from what providers report: the estimate's factor, the
template overhead of exact counts, and the window an engine really runs.

Two things are learned per model from each answer's reported prompt_tokens:

* the estimate's factor. The raw estimate errs high against cl100k, but a
  model's own tokenizer may count more (code on Gemma) or far less (Hindi on
  Gemma is a ninth of the estimate).
* the per-message overhead of the chat template, for models counted exactly by
  their own tokenizer (which counts content only): what the provider counted
  beyond the content, per message.

Both are shared by every user of the model, so no single caller may steer them:
each rises only when the median of the model's last RECENT observations is higher
(one odd prompt is outvoted), by at most a bounded step per observation, and falls a
tenth of the way toward a lower observation, within their bounds. What they learn from
is only what the app sized itself (see `webapp.llm.manager.LLMManager._learn`). A
refusal still tightens at once: the retry has to fit.

The third is the window: an engine started with a smaller context than the catalog
declares (llama.cpp's or Ollama's `-c`) says so when it refuses a prompt, and the
window it names is kept, so every later send is fitted to it.

All are stored, so a restart keeps what was learned.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import deque
from datetime import datetime
from typing import Any

from sqlalchemy import Column, DateTime, func
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Field, Session, SQLModel, col, select

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
RECENT = 9
"""Observations per model whose median a rise follows: one odd prompt, whoever sent it, is
outvoted by the others."""
FACTOR_STEP = 0.25
"""The most one observation raises the factor by, as a share of it."""
OVERHEAD_STEP = 2.0
"""The most one observation raises the template overhead by, in tokens per message."""
BLIND_TIGHTENING = 1.25
"""Used when a provider refuses a prompt as too long without saying how long it was."""


class ModelCalibration(SQLModel, table=True):
    __tablename__ = "model_calibration"

    model: str = Field(primary_key=True, max_length=100)
    factor: float = 1.0
    samples: int = 0
    message_overhead: float | None = None
    learned_window: int | None = None
    """The window the engine said it runs, when smaller than the catalog's (None: none)."""
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )


def _clamp(factor: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, factor))


def _learned(current: float, observed: float, median: float, step: float) -> float:
    """The rule both learned values follow. Up only when the median of the recent
    observations is higher, and by at most `step`: one observation, whoever made the
    prompt, cannot raise the bound's price for everyone. Down a tenth of the way toward
    a lower observation (one moves it a little; the median brings it back up)."""
    if median > current:
        return min(median, current + step)
    if observed < current:
        return current + DECAY * (observed - current)
    return current


def learned_windows(session: Session) -> list[tuple[str, int]]:
    """Every model's learned window, by model name (for the admin review)."""
    rows = session.exec(
        select(ModelCalibration.model, ModelCalibration.learned_window)
        .where(col(ModelCalibration.learned_window).is_not(None))
        .order_by(col(ModelCalibration.model))
    )
    return [(model, window) for model, window in rows if window is not None]


class Calibrator:
    """The factors in memory, written through to the database when they change."""

    def __init__(self, db: Database | None = None) -> None:
        self._db = db
        self._factors: dict[str, float] = {}
        self._samples: dict[str, int] = {}
        self._overheads: dict[str, float] = {}
        self._windows: dict[str, int] = {}
        self._recent: dict[tuple[str, str], deque[float]] = {}
        self._storing: set[str] = set()
        self._stale: set[str] = set()

    def factor(self, model: str) -> float:
        return self._factors.get(model, 1.0)

    def overhead(self, model: str) -> int:
        """Template tokens per message to add to exact content counts."""
        return math.ceil(self._overheads.get(model, DEFAULT_OVERHEAD))

    def window(self, model: str) -> int | None:
        """The window the model's engine said it runs, when it refused a prompt for being
        longer (None: none learned)."""
        return self._windows.get(model)

    def windows(self) -> dict[str, int]:
        return dict(self._windows)

    def _learn(self, kind: str, model: str, current: float, observed: float, step: float) -> float:
        """`current` moved by one observation of `kind` (see `_learned`)."""
        recent = self._recent.setdefault((kind, model), deque(maxlen=RECENT))
        recent.append(observed)
        return _learned(current, observed, statistics.median(recent), step)

    async def load(self) -> None:
        if self._db is None:
            return
        rows = await self._db.read(lambda session: list(session.exec(select(ModelCalibration))))
        for row in rows:
            self._factors[row.model] = _clamp(row.factor)
            self._samples[row.model] = row.samples
            if row.message_overhead is not None:
                self._overheads[row.model] = row.message_overhead
            if row.learned_window is not None and row.learned_window > 0:
                self._windows[row.model] = row.learned_window

    async def observe(self, model: str, raw_estimate: int, prompt_tokens: int) -> float:
        """Learn from one answer: the provider counted `prompt_tokens` for what we put at
        `raw_estimate`."""
        if raw_estimate <= 0 or prompt_tokens <= 0:
            return self.factor(model)
        current = self.factor(model)
        observed = prompt_tokens / raw_estimate * MARGIN
        return await self._set(
            model, _clamp(self._learn("factor", model, current, observed, current * FACTOR_STEP))
        )

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
        new = min(
            float(MAX_OVERHEAD),
            self._learn("overhead", model, current, observed + 0.5, OVERHEAD_STEP),
        )
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

    async def learn_window(self, model: str, window: int) -> bool:
        """The engine refused a prompt naming a window of `window` tokens: fit every later
        send to it. Only ever lowers (the catalog's window stays the ceiling); whether it
        was learned."""
        current = self._windows.get(model)
        if window <= 0 or (current is not None and window >= current):
            return False
        self._windows[model] = window
        log.warning("model %s: the engine runs a window of %d tokens; fitting to it", model, window)
        await self._store(model)
        return True

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
            "learned_window": self._windows.get(model),
            "updated_at": utcnow(),
        }
        connection = session.connection()
        postgres = connection.dialect.name == "postgresql"
        statement = (postgresql_insert if postgres else sqlite_insert)(ModelCalibration)
        statement = statement.values(values)
        updates: dict[str, Any] = {key: statement.excluded[key] for key in values if key != "model"}
        # A process that has not learned the window (another worker did) keeps it.
        updates["learned_window"] = func.coalesce(
            statement.excluded.learned_window, col(ModelCalibration.learned_window)
        )
        connection.execute(statement.on_conflict_do_update(index_elements=["model"], set_=updates))
