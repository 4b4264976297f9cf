"""The engine's reading of the prompt as notices carry it to other workers: whole numbers
that add up, cut into payloads PostgreSQL takes; a notice that is not one is refused."""

from __future__ import annotations

import pytest

from webapp.chat.answering.readings import PAYLOAD_LIMIT, parse_readings, reading_payloads
from webapp.llm.providers.base import Prefill


def test_readings_go_out_and_come_back_whole() -> None:
    readings = [(n, Prefill(n * 10, 100_000 + n, n)) for n in range(1, 600)]
    notices = reading_payloads(readings, "progress")
    assert len(notices) > 1, "many answers' readings take several notices"
    assert all(len(notice.encode()) < PAYLOAD_LIMIT for notice in notices)
    heard = [r for notice in notices for r in parse_readings(notice.split(" ", 1)[1])]
    assert heard == readings
    assert reading_payloads([], "progress") == []


@pytest.mark.parametrize(
    "body",
    [
        "half",
        "{}",
        "[[1, 2, 3]]",
        "[[1, 2, 3, -1]]",
        '[[1, "2", 3, 0]]',
        "[[1, 2.5, 3, 0]]",
        "[[1, 20, 10, 0]]",  # read past the end
        "[[1, 5, 10, 11]]",  # more cached than the prompt
        "[[1, true, 10, 0]]",
    ],
)
def test_a_notice_that_is_not_a_reading_is_refused(body: str) -> None:
    with pytest.raises(ValueError):
        parse_readings(body)
