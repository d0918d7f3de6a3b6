"""An evaluation's pattern and command checks share one deadline (docs/loop.md#bounded-checks).

Twelve patterns at the caps (each near the 2000-instruction program cap, each search near
the cost cap over its file) take a minute or more together on RE2's slow matcher, every
iteration. With a check budget, the evaluation ends at the deadline, the checks it did not
reach fail as "check budget spent", named in the evaluation; and a second run on the same
worker goes from start to finish while the first one's checks hold their thread.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from loopworks.checks.budget import BUDGET_SPENT
from loopworks.schemas.events import EvaluationDone
from loopworks.schemas.patterns import MATCH_COST_MAX, PROGRAM_MAX_SIZE, compile_pattern, match_cost
from loopworks.schemas.run import RunStatus, Step
from tests.workflows.conftest import LoopHarness, commit_all
from tests.workflows.test_loop import TITLE_RULE

pytestmark = pytest.mark.workflow

BUDGET_S = 8.0
TEXT_BYTES = 1 << 19  # 512 KiB of `a`s and `b`s: the patterns' automata blow up on it


def _pattern(n: int) -> str:
    """The nth pattern at the caps: a different one each time (no cache helps), all of
    them RE2's slow case over random `ab` text."""
    return f"[ab]{{0,{600 - n}}}a[ab]{{{740 + 2 * n}}}c"


PATTERNS = [_pattern(n) for n in range(12)]


def test_the_patterns_are_admissible_and_at_the_caps() -> None:
    for pattern in PATTERNS:
        regex = compile_pattern(pattern, multiline=True)
        assert 0.95 * PROGRAM_MAX_SIZE < regex.programsize <= PROGRAM_MAX_SIZE, pattern
        assert 0.9 * MATCH_COST_MAX < match_cost(regex, TEXT_BYTES) <= MATCH_COST_MAX


def _repository(tmp_path: Path) -> Path:
    repo = tmp_path / "heavy-project"
    repo.mkdir()
    rng = random.Random(36)
    (repo / "big.txt").write_text("".join(rng.choice("ab") for _ in range(TEXT_BYTES)))
    commit_all(repo)
    return repo


async def test_twelve_patterns_at_the_caps_end_at_the_budget_while_another_run_completes(
    harness: LoopHarness, tmp_path: Path
) -> None:
    repo = _repository(tmp_path)
    rules = [
        {
            "id": f"heavy-{n}",
            "description": "a costly pattern",
            "severity": "warn",
            "check": {"kind": "pattern", "pattern": pattern, "path": "big.txt"},
        }
        for n, pattern in enumerate(PATTERNS)
    ]
    async with harness.worker(LOOPS_CHECK_BUDGET_S=BUDGET_S):
        heavy = await harness.start(
            task="Keep the data file", repo=str(repo), rules=rules, max_iterations=1
        )

        async def evaluating() -> bool:
            state = await harness.status(heavy)
            return state.current_step == Step.EVALUATE

        deadline = asyncio.get_running_loop().time() + 60
        while not await evaluating():
            assert asyncio.get_running_loop().time() < deadline, "never reached EVALUATE"
            await asyncio.sleep(0.05)
        light = await harness.start(task="Write a short note", rules=[TITLE_RULE])
        light_result = await light.result()
        # The other run came and went while this one was still in its only evaluation.
        assert await evaluating()
        heavy_result = await heavy.result()
        events = await harness.events(heavy)

    assert light_result.state.status == RunStatus.COMPLETED
    (evaluation,) = [e.payload for e in events if isinstance(e, EvaluationDone)]
    content = evaluation.groups["content"]
    # Unbounded, these twelve take a minute or more; the budget ends them at its deadline
    # (the margin is for reading the file and a loaded machine, not for another search).
    assert content.finished_at - content.started_at < BUDGET_S + 6, content
    assert evaluation.unchecked, "every pattern was searched within the budget"
    assert set(evaluation.unchecked) <= {rule["id"] for rule in rules}
    rules_seen = {r.id: r for r in heavy_result.state.evaluation.rules}  # type: ignore[union-attr]
    for rule_id in evaluation.unchecked:
        outcome = rules_seen[rule_id]
        assert outcome.unchecked and not outcome.passed
        assert outcome.detail.startswith(BUDGET_SPENT), outcome.detail
    # The checks run in order: those it reached before the deadline were decided.
    decided = [r for r in rules_seen.values() if not r.unchecked]
    assert all(not r.detail.startswith(BUDGET_SPENT) for r in decided)
    assert [r.id for r in decided] == [f"heavy-{n}" for n in range(len(decided))]
