"""tests/unit holds pure logic only: `-m unit` and the folder mean the same tests, and a
test that needs git, a server or a process lives with the integration or workflow tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

UNIT = Path(__file__).resolve().parent
OTHER_MARKS = re.compile(r"pytest\.mark\.(integration|workflow|deploy|packaging)\b")


def test_every_test_in_tests_unit_is_a_unit_test() -> None:
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(UNIT.glob("test_*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if OTHER_MARKS.search(line)
    ]
    assert found == [], "move these to the folder of their kind:\n" + "\n".join(found)
