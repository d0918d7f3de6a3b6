"""QA, the last gate: an agent that reads the run's change and answers VERIFIED or ISSUES,
on the time-skipping server with the offline model scripted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loopworks.agent.trajectory import from_jsonl
from loopworks.schemas.run import RunStatus, StopReason
from tests.workflows.conftest import LoopHarness, names
from tests.workflows.test_loop import TITLE_RULE, remote_file

pytestmark = pytest.mark.workflow

PROBLEM = "The guide never says how to run the tests: `pytest -q` fails on tests/test_guide.py"
ISSUES = {
    "verdict": "ISSUES",
    "issues": [{"rule_id": "qa", "problem": PROBLEM, "fix": "Add a Running the tests section"}],
    "summary": "Ran `pytest -q`: exit 1, one failure; the guide claims otherwise.",
}
VERIFIED = {"verdict": "VERIFIED", "summary": "Ran the checks; every criterion holds."}


def trajectories(origin: Path, branch: str) -> dict[str, str]:
    listed = subprocess.run(
        ["git", "--git-dir", str(origin), "ls-tree", "--name-only", f"{branch}:.loops/trajectory"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {name: remote_file(origin, branch, f".loops/trajectory/{name}") for name in listed}


async def test_qa_issues_reach_the_refiner_and_verified_completes(harness: LoopHarness) -> None:
    script = {"qa-verifier": {"1": ISSUES, "2": VERIFIED}}
    async with harness.worker(script=script):
        handle = await harness.start(task="Write a testing guide", rules=[TITLE_RULE])
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED
    assert state.iteration == 2
    verdicts = [e.payload.verdict for e in events if e.event.value == "qa_verdict"]
    assert verdicts == ["ISSUES", "VERIFIED"]
    flow = names(events)
    first_qa = flow.index("qa_verdict")
    assert flow.index("refinement_done", first_qa) < flow.index("qa_verdict", first_qa + 1)
    saved = trajectories(harness.origin, state.branch)
    # The refiner was given QA's issues as its critique.
    refine = next(text for name, text in saved.items() if name.endswith("-refine.jsonl"))
    assert PROBLEM in refine
    # QA's own conversation is the run's trajectory too (`step: qa`), and it was sent the
    # change: the stat of what the run did since it started.
    qa = from_jsonl(saved["01-qa.jsonl"])
    assert {r.step for r in qa} == {"qa"}
    first_message = next(r.input for r in qa if r.kind == "user")
    assert "## Diff Stat" in first_message and "artifact.md" in first_message
    assert "## Patch" in first_message
    assert "02-qa.jsonl" in saved


async def test_qa_issues_at_the_last_iteration_end_the_run_rejected(
    harness: LoopHarness,
) -> None:
    async with harness.worker(script={"qa-verifier": {"*": ISSUES}}):
        handle = await harness.start(
            task="Write a testing guide", rules=[TITLE_RULE], max_iterations=1
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.STOPPED
    assert state.stop.reason == StopReason.QA_REJECTED
    assert state.stop.message == ISSUES["summary"]
    verdict = next(e for e in events if e.event.value == "qa_verdict")
    assert verdict.payload.verdict == "ISSUES"
    assert json.loads(verdict.payload.model_dump_json())["issues"][0]["problem"] == PROBLEM
    assert "refinement_done" not in names(events)
    # The rejected run is still pushed, with what QA did on its branch.
    qa = from_jsonl(trajectories(harness.origin, state.branch)["01-qa.jsonl"])
    assert qa[-1].kind in ("tool_call", "tool_result")
