"""What a model's calibration stores, when many answers of it finish at once."""

from __future__ import annotations

import asyncio

import pytest

from webapp.db import Args, Database, Result, Work
from webapp.llm.calibration import FACTOR_STEP, MARGIN, Calibrator

CALLER = "user:1"


async def test_answers_finishing_together_store_one_row_that_a_restart_reads(
    database_url: str,
) -> None:
    db = Database(database_url)
    try:
        # Fifty answers of a model never seen before learn at the same moment: each
        # would insert the model's row; none may fail for it.
        learners = [Calibrator(db) for _ in range(50)]
        await asyncio.gather(
            *(
                c.observe("fresh", raw_estimate=100, prompt_tokens=150, caller=CALLER)
                for c in learners
            )
        )
        restarted = Calibrator(db)
        await restarted.load()
        # One observation each: one bounded step toward 1.5 x MARGIN, the caller's own.
        assert restarted.factor("fresh", CALLER) == pytest.approx(1 + FACTOR_STEP)
        assert restarted.factor("fresh") == 1.0, "one caller is no agreement"
        await learners[0].observe_overhead("fresh", 500, 10, 573, fixed=3, caller=CALLER)
        restarted = Calibrator(db)
        await restarted.load()
        assert restarted.overhead("fresh", CALLER) == 8, "an update of the same row is kept too"
    finally:
        await db.dispose()


class CountingDatabase(Database):
    """The real database, counting the write transactions it is asked for."""

    writes = 0

    async def write(self, work: Work[*Args, Result], *args: *Args) -> Result:
        self.writes += 1
        return await super().write(work, *args)


async def test_answers_finishing_together_write_once_with_the_newest_values(
    database_url: str,
) -> None:
    """Two hundred answers ending in the same moment each move the factor: the row is
    written while they learn, then once more with where they left it, not 200 times on
    the one writer."""
    db = CountingDatabase(database_url)
    try:
        calibrator = Calibrator(db)
        await asyncio.gather(
            *(
                calibrator.observe("busy", raw_estimate=100, prompt_tokens=100 + i, caller=CALLER)
                for i in range(200)
            )
        )
        assert db.writes == 2
        restarted = Calibrator(db)
        await restarted.load()
        assert restarted.factor("busy", CALLER) == pytest.approx(calibrator.factor("busy", CALLER))
        # The median of the caller's last observations, reached in bounded steps.
        assert 2.9 * MARGIN <= restarted.factor("busy", CALLER) <= 2.99 * MARGIN
    finally:
        await db.dispose()
