"""Which of two records of one call is the call's (workspace/call_records.py): the one that
finished later, by its first line's time; a failed attempt's record is left on its ref and
its retry's is committed, so both may be found."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from loopworks.workspace.call_records import finished_later, record_finished

pytestmark = pytest.mark.unit

FAILED = '{"ts":"2024-05-01T11:59:00","turn":1}\n{"ts":"2024-05-01T12:30:00","turn":2}\n'
RETRY = '{"ts":"2024-05-01T12:01:00+00:00","turn":1}\n'


def test_a_record_finished_when_its_first_line_says() -> None:
    # Every line of a call is written as it ends: the first line's time is the call's.
    assert record_finished(FAILED) == datetime(2024, 5, 1, 11, 59, tzinfo=UTC)
    assert record_finished(RETRY.encode()) == datetime(2024, 5, 1, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize("broken", ["", "not json\n", '{"turn":1}\n', '{"ts":"soon"}\n', "[]\n"])
def test_a_record_without_a_time_is_the_earliest(broken: str) -> None:
    assert record_finished(broken) == datetime.min.replace(tzinfo=UTC)
    assert finished_later(RETRY, broken) and not finished_later(broken, RETRY)


def test_the_retry_is_later_than_the_attempt_before_it_in_either_form() -> None:
    assert finished_later(RETRY, FAILED) and not finished_later(FAILED, RETRY)
    assert finished_later(RETRY.encode(), FAILED) and not finished_later(FAILED.encode(), RETRY)
    # One record weighed against itself is no later and no earlier: the first one given wins.
    assert finished_later(RETRY, RETRY)
