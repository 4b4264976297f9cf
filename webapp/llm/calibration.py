"""Learning from what providers report: the estimate's factor, the
template overhead of exact counts, and the window an engine really runs.

Two things are learned from each answer's reported prompt_tokens:

* the estimate's factor. The raw estimate errs high against cl100k, but a
  model's own tokenizer may count more (code on Gemma) or far less (Hindi on
  Gemma is a ninth of the estimate).
* the per-message overhead of the chat template, for models counted exactly by
  their own tokenizer (which counts content only): what the provider counted
  beyond the content, per message.

Both are learned per caller first (a user, with all of its tokens; an embed's visitor):
what one caller's prompts teach sizes that caller's own sends, and the model's shared
figure, which sizes every caller without a figure of its own, follows the callers' own
figures only when several distinct callers agree (`webapp.llm.agreement`). So no caller
moves another's bound, in either direction. A caller's own figure rises only when the
median of its last RECENT observations is higher (one odd prompt of its own is outvoted),
by at most a bounded step per observation, and falls a tenth of the way toward a lower
observation, within their bounds. What they learn from is only what the app sized itself
(see `webapp.llm.manager.LLMManager._learn`). A refusal tightens the refused caller's own
figure at once: its retry has to fit.

The third is the window: an engine started with a smaller context than the catalog
declares (llama.cpp's or Ollama's `-c`) says so when it refuses a prompt, and the
window it names is kept, so every later send is fitted to it. It is keyed by model
alone: it is the engine's statement of its own configuration, never a size of what a
caller sent, and it only ever lowers the bound.

All are stored, so a restart keeps what was learned.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Column, DateTime, func
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Field, Session, SQLModel, col, select

from webapp.db import Database
from webapp.llm.agreement import Votes
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
"""Observations per caller and model whose median a rise of the caller's own figure follows:
one odd prompt is outvoted by the caller's others."""
FACTOR_STEP = 0.25
"""The most one observation raises the factor by, as a share of it."""
OVERHEAD_STEP = 2.0
"""The most one observation raises the template overhead by, in tokens per message."""
BLIND_TIGHTENING = 1.25
"""Used when a provider refuses a prompt as too long without saying how long it was."""
CALLERS_KEPT = 20_000
"""Callers' own figures kept in memory (per model and caller, the most recently learned):
one evicted is sized by the shared figure until it learns again."""


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


class CallerCalibration(SQLModel, table=True):
    """One caller's own figures for one model: what its own traffic taught."""

    __tablename__ = "caller_calibration"

    model: str = Field(primary_key=True, max_length=100)
    caller: str = Field(primary_key=True, max_length=100)
    """The owner key the figures were learned from (`user:<id>`, `embed:<name>:<visitor>`)."""
    factor: float | None = None
    message_overhead: float | None = None
    updated_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )


FACTOR = "factor"
OVERHEAD = "overhead"
"""The two figures learned per caller first, by the name their votes and rows go by."""
UNLEARNED = {FACTOR: 1.0, OVERHEAD: float(DEFAULT_OVERHEAD)}


def _bounded(kind: str, figure: float) -> float:
    if kind == FACTOR:
        return min(MAX_FACTOR, max(MIN_FACTOR, figure))
    return min(float(MAX_OVERHEAD), max(0.0, figure))


def _shared_step(kind: str, current: float) -> tuple[float, float]:
    """How far one vote may move a shared figure at `current`: (up, down)."""
    rise = current * FACTOR_STEP if kind == FACTOR else OVERHEAD_STEP
    return rise, current * DECAY


@dataclass(slots=True)
class Own:
    """A caller's own figures for one model, by kind (absent: not learned, the shared one
    sizes), and the caller's recent observations of each, whose median a rise follows."""

    figures: dict[str, float] = field(default_factory=dict)
    recent: dict[str, list[float]] = field(default_factory=dict)

    def median_with(self, kind: str, observed: float) -> float:
        """The median of the RECENT last observations of `kind`, `observed` now one."""
        recent = self.recent.setdefault(kind, [])
        recent.append(observed)
        del recent[:-RECENT]
        return statistics.median(recent)


def _learned(current: float, observed: float, median: float, step: float) -> float:
    """The rule a caller's own figures follow. Up only when the median of the caller's
    recent observations is higher, and by at most `step`: one odd prompt does not raise
    the price of the caller's every send. Down a tenth of the way toward a lower
    observation (one moves it a little; the median brings it back up)."""
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
    """The figures in memory, written through to the database when they change."""

    def __init__(self, db: Database | None = None) -> None:
        self._db = db
        self._shared: dict[str, dict[str, float]] = {FACTOR: {}, OVERHEAD: {}}
        """By kind, then model: the figures that size callers with none of their own."""
        self._samples: dict[str, int] = {}
        self._windows: dict[str, int] = {}
        self._own: dict[tuple[str, str], Own] = {}
        """By (model, caller), the most recently learned last."""
        self._votes: dict[tuple[str, str], Votes] = {}
        """By (kind, model): the callers' own figures, one vote per voter."""
        self._storing: set[str] = set()
        self._pending: dict[str, set[str | None]] = {}
        """By model, the rows to write: callers' own, and None for the shared row."""

    def _figure(self, kind: str, model: str, caller: str | None) -> float:
        """`caller`'s own figure of `kind` when learned, else the model's shared one (the
        shared one alone when no caller is named)."""
        own = self._own.get((model, caller)) if caller is not None else None
        if own is not None and kind in own.figures:
            return own.figures[kind]
        return self._shared[kind].get(model, UNLEARNED[kind])

    def factor(self, model: str, caller: str | None = None) -> float:
        """The estimate's factor for `caller`'s sends."""
        return self._figure(FACTOR, model, caller)

    def overhead(self, model: str, caller: str | None = None) -> int:
        """Template tokens per message to add to exact content counts, for `caller`'s sends."""
        return math.ceil(self._figure(OVERHEAD, model, caller))

    def window(self, model: str) -> int | None:
        """The window the model's engine said it runs, when it refused a prompt for being
        longer (None: none learned)."""
        return self._windows.get(model)

    def windows(self) -> dict[str, int]:
        return dict(self._windows)

    def _own_of(self, model: str, caller: str) -> Own:
        """`caller`'s own figures for `model`, made the most recently learned (the oldest
        are forgotten past CALLERS_KEPT)."""
        own = self._own.pop((model, caller), None) or Own()
        self._own[(model, caller)] = own
        if len(self._own) > CALLERS_KEPT:
            del self._own[next(iter(self._own))]
        return own

    def _vote(self, kind: str, model: str, caller: str, figure: float) -> Votes:
        votes = self._votes.setdefault((kind, model), Votes())
        votes.cast(caller, figure)
        return votes

    async def load(self) -> None:
        if self._db is None:
            return
        rows, owns = await self._db.read(_read_all)
        for row in rows:
            self._shared[FACTOR][row.model] = _bounded(FACTOR, row.factor)
            self._samples[row.model] = row.samples
            if row.message_overhead is not None:
                self._shared[OVERHEAD][row.model] = _bounded(OVERHEAD, row.message_overhead)
            if row.learned_window is not None and row.learned_window > 0:
                self._windows[row.model] = row.learned_window
        for mine in owns:
            own = self._own_of(mine.model, mine.caller)
            for kind, figure in ((FACTOR, mine.factor), (OVERHEAD, mine.message_overhead)):
                if figure is not None:
                    own.figures[kind] = _bounded(kind, figure)
                    self._vote(kind, mine.model, mine.caller, own.figures[kind])

    async def observe(
        self, model: str, raw_estimate: int, prompt_tokens: int, *, caller: str
    ) -> float:
        """Learn from one of `caller`'s answers: the provider counted `prompt_tokens` for
        what we put at `raw_estimate`. Returns the caller's factor."""
        if raw_estimate > 0 and prompt_tokens > 0:
            self._samples[model] = self._samples.get(model, 0) + 1
            observed = prompt_tokens / raw_estimate * MARGIN
            step = self.factor(model, caller) * FACTOR_STEP
            await self._learn(FACTOR, model, caller, observed, step)
        return self.factor(model, caller)

    async def observe_overhead(
        self,
        model: str,
        counted_tokens: int,
        messages: int,
        prompt_tokens: int,
        fixed: int,
        *,
        caller: str,
    ) -> int:
        """Learn the template overhead from one of `caller`'s answers: the provider counted
        `prompt_tokens` for `messages` messages whose content its tokenizer put at
        `counted_tokens`, plus `fixed` tokens (reply priming) that are not per message."""
        if messages > 0 and prompt_tokens > 0:
            observed = max(0.0, (prompt_tokens - counted_tokens - fixed) / messages) + 0.5
            await self._learn(OVERHEAD, model, caller, observed, OVERHEAD_STEP)
        return self.overhead(model, caller)

    async def _learn(
        self, kind: str, model: str, caller: str, observed: float, step: float
    ) -> None:
        """`caller`'s own figure of `kind` moved by one observation (see `_learned`)."""
        current = self._figure(kind, model, caller)
        median = self._own_of(model, caller).median_with(kind, observed)
        await self._set(kind, model, caller, _learned(current, observed, median, step))

    async def tighten_overhead(self, model: str, *, caller: str) -> int:
        """An exactly counted prompt of `caller`'s was still refused: the template costs
        more than its figure says. Double the caller's overhead (bounded) so its re-fit
        lands inside; the shared figure follows only if other callers agree."""
        current = self._figure(OVERHEAD, model, caller)
        await self._set(OVERHEAD, model, caller, max(current * 2, current + 4))
        return self.overhead(model, caller)

    async def learn_window(self, model: str, window: int) -> bool:
        """The engine refused a prompt naming a window of `window` tokens: fit every later
        send to it. Only ever lowers (the catalog's window stays the ceiling); whether it
        was learned."""
        current = self._windows.get(model)
        if window <= 0 or (current is not None and window >= current):
            return False
        self._windows[model] = window
        log.warning("model %s: the engine runs a window of %d tokens; fitting to it", model, window)
        await self._store(model, None)
        return True

    async def tighten(
        self,
        model: str,
        raw_estimate: int,
        prompt_tokens: int | None = None,
        *,
        caller: str,
        limit: int | None = None,
        budget: int | None = None,
        reserve: int = 0,
    ) -> float:
        """The provider refused a prompt of `caller`'s as too long: count more for that
        caller from now on (its retry has to fit); the shared factor follows only if other
        callers agree.

        When the refusal names the prompt's size, the factor jumps to the observed
        ratio; when it also names a limit smaller than the window we believed, the
        factor absorbs that too, so the next fit lands inside the real limit.
        """
        current = self.factor(model, caller)
        ratio = prompt_tokens / raw_estimate if prompt_tokens and raw_estimate > 0 else None
        target = current * BLIND_TIGHTENING if ratio is None else ratio * MARGIN
        if limit and budget and ratio is not None:
            real_budget = limit - reserve - math.ceil(limit * SAFETY_FRACTION)
            if 0 < real_budget < budget:
                target = ratio * budget / real_budget * MARGIN
        new = _bounded(FACTOR, max(current * 1.1, target))
        log.warning(
            "context length exceeded on %s: calibration %.3f -> %.3f for its caller",
            model,
            current,
            new,
        )
        await self._set(FACTOR, model, caller, new)
        return self.factor(model, caller)

    async def _set(self, kind: str, model: str, caller: str, figure: float) -> None:
        """`caller`'s own figure of `kind` is now `figure` (within its bounds): its vote,
        and the shared figure's bounded step if the callers agree."""
        own = self._own_of(model, caller)
        figure = _bounded(kind, figure)
        before = own.figures.get(kind)
        own.figures[kind] = figure
        current = self._figure(kind, model, None)
        rise, fall = _shared_step(kind, current)
        shared = _bounded(kind, self._vote(kind, model, caller, figure).agreed(current, rise, fall))
        if abs(shared - current) > 1e-3:
            self._shared[kind][model] = shared
            await self._store(model, None)
        if before is None or abs(figure - before) > 1e-3:
            await self._store(model, caller)

    async def _store(self, model: str, caller: str | None) -> None:
        """Write `caller`'s row of `model` through (None: the shared row), one transaction
        per model at a time: answers that finish together each change figures, and while
        one write is on its way the others only add their rows to the next, so one more
        write takes the newest values of all of them (one transaction on SQLite's one
        writer, not one per answer)."""
        if self._db is None:
            return
        self._pending.setdefault(model, set()).add(caller)
        if model in self._storing:
            return
        self._storing.add(model)
        try:
            while rows := self._pending.pop(model, None):
                await self._db.write(self._write, model, rows)
        finally:
            self._storing.discard(model)

    def _write(self, session: Session, model: str, rows: set[str | None]) -> None:
        """Upserts: answers of one model finish together, and on PostgreSQL their
        transactions run side by side; a read-then-insert would let two of them insert
        the same new row."""
        connection = session.connection()
        insert = postgresql_insert if connection.dialect.name == "postgresql" else sqlite_insert
        if None in rows:
            connection.execute(self._shared_upsert(insert, model))
        callers = sorted(caller for caller in rows if caller is not None)
        if callers:
            owns = [(caller, self._own.get((model, caller))) for caller in callers]
            values = [
                {
                    "model": model,
                    "caller": caller,
                    "factor": own.figures.get(FACTOR),
                    "message_overhead": own.figures.get(OVERHEAD),
                    "updated_at": utcnow(),
                }
                for caller, own in owns
                if own is not None
            ]
            if values:
                statement = insert(CallerCalibration).values(values)
                updates = {
                    key: statement.excluded[key]
                    for key in ("factor", "message_overhead", "updated_at")
                }
                connection.execute(
                    statement.on_conflict_do_update(
                        index_elements=["model", "caller"], set_=updates
                    )
                )

    def _shared_upsert(self, insert: Any, model: str) -> Any:
        values = {
            "model": model,
            "factor": self.factor(model),
            "samples": self._samples.get(model, 0),
            "message_overhead": self._shared[OVERHEAD].get(model),
            "learned_window": self._windows.get(model),
            "updated_at": utcnow(),
        }
        statement = insert(ModelCalibration).values(values)
        updates: dict[str, Any] = {key: statement.excluded[key] for key in values if key != "model"}
        # A process that has not learned the window (another worker did) keeps it.
        updates["learned_window"] = func.coalesce(
            statement.excluded.learned_window, col(ModelCalibration.learned_window)
        )
        return statement.on_conflict_do_update(index_elements=["model"], set_=updates)


def _read_all(session: Session) -> tuple[list[ModelCalibration], list[CallerCalibration]]:
    """The shared rows, and the most recently learned CALLERS_KEPT callers' own rows, the
    oldest first (so the newest vote of each voter is cast last)."""
    shared = list(session.exec(select(ModelCalibration)))
    newest = select(CallerCalibration).order_by(col(CallerCalibration.updated_at).desc())
    owns = list(session.exec(newest.limit(CALLERS_KEPT)))
    return shared, owns[::-1]
