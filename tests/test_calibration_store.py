"""What a model's calibration stores, when many answers of it finish at once."""

from __future__ import annotations

import asyncio

import pytest

from webapp.db import Database
from webapp.llm.calibration import Calibrator


async def test_answers_finishing_together_store_one_row_that_a_restart_reads(
    database_url: str,
) -> None:
    db = Database(database_url)
    try:
        # Fifty answers of a model never seen before learn at the same moment: each
        # would insert the model's row; none may fail for it.
        learners = [Calibrator(db) for _ in range(50)]
        await asyncio.gather(
            *(c.observe("fresh", raw_estimate=100, prompt_tokens=150) for c in learners)
        )
        restarted = Calibrator(db)
        await restarted.load()
        assert restarted.factor("fresh") == pytest.approx(1.5 * 1.05)
        await learners[0].observe_overhead("fresh", 500, 10, 573, fixed=3)
        restarted = Calibrator(db)
        await restarted.load()
        assert restarted.overhead("fresh") == 8, "an update of the same row is kept too"
    finally:
        await db.dispose()
