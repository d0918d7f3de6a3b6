"""`GET /runs?before=`: the next page is the runs started before a time, a visibility
condition Temporal must accept for any time a client can send (the API fuzz found a
500 and a 502 at the ends of the calendar)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from loopworks.api.listing import visibility_query, visibility_time

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("when", "said"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "2026-01-02T03:04:05.678901Z"),
        (datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05.000000Z"),  # naive: UTC
        (
            datetime(2026, 1, 2, 3, 0, tzinfo=timezone(timedelta(hours=2))),
            "2026-01-02T01:00:00.000000Z",
        ),
        (datetime(1, 1, 1), "0001-01-01T00:00:00.000000Z"),
        (datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), "0001-01-01T00:00:00.000000Z"),
        (
            datetime.max.replace(tzinfo=timezone(timedelta(hours=-14))),
            "9999-12-31T23:59:59.999999Z",
        ),
    ],
)
def test_a_time_is_written_as_visibility_parses_it(when: datetime, said: str) -> None:
    assert visibility_time(when) == said


def test_before_adds_a_start_time_condition() -> None:
    query = visibility_query(None, "a-guide", datetime(2026, 1, 2, tzinfo=UTC))
    assert query == (
        'WorkflowType = "LoopWorkflow" AND LoopAlias = "a-guide"'
        ' AND StartTime < "2026-01-02T00:00:00.000000Z"'
    )
