"""QA, the last gate: an agent that reads the run's change and answers VERIFIED or ISSUES,
on the time-skipping server with the offline model scripted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopworks.agent.trajectory import from_jsonl
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
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


# --- a producer that breaks a test and says all is well ---------------------------------------

CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
    'if __name__ == "__main__":\n    unittest.main()\n'
)
TEST_COMMAND = "/usr/bin/python3 -m unittest -q test_calc"
BROKEN = {
    "files": [
        {"path": "calc.py", "content": "def add(a, b):\n    return a - b\n"},
        {"path": "artifact.md", "content": "# Faster add\n\nRewrote add; all tests pass.\n"},
    ],
    "summary": "Rewrote add; all tests pass.",
}


class VerifierRunningTheTests:
    """A ModelSource whose QA verifier does what its prompt asks, and nothing more: it runs
    the tests, then answers from their exit code (citing the output); every other role
    is the offline model's."""

    strict_output = False

    def __init__(self, offline: OfflineModels) -> None:
        self.offline = offline
        self.results: list[str] = []

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> Model:
        if call.role != Role.QA_VERIFIER:
            return self.offline.model(call)
        return FunctionModel(self.verify, model_name="verifier")

    def verify(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = [
            p.model_response_str()
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "run_command"
        ]
        if not results:
            return ModelResponse(parts=[ToolCallPart("run_command", {"command": TEST_COMMAND})])
        self.results.append(results[-1])
        # A failed command comes back as an error result: `{"error": "exit code 1\n..."}`.
        passed = results[-1].startswith("exit code 0")
        report = (
            {"verdict": "VERIFIED", "summary": f"`{TEST_COMMAND}` passed."}
            if passed
            else {
                "verdict": "ISSUES",
                "issues": [
                    {"rule_id": "qa", "problem": results[-1][:500], "fix": "Make the test pass"}
                ],
                "summary": f"`{TEST_COMMAND}` fails: {results[-1][:200]}",
            }
        )
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, report)])


async def test_qa_running_the_tests_catches_a_broken_change_the_artifact_calls_a_success(
    harness: LoopHarness, repo: Path
) -> None:
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST_CALC)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "calc"],
        cwd=repo,
        check=True,
    )
    source = VerifierRunningTheTests(
        OfflineModels(script=OfflineScript.model_validate({"producer": {"*": BROKEN}}))
    )
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue, LOOPS_LLM="offline"
    )
    async with build_worker(harness.env.client, settings, models=source):
        # No proof of the run's own: QA alone stands between the change and completion.
        handle = await harness.start(
            task="Make add faster",
            repo=str(repo),
            rules=[TITLE_RULE],
            max_iterations=1,
            verify=[],
            allow_unverified=True,
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    # The checks passed (the artifact has its title); the test the change broke did not.
    evaluations = [e.payload.passed for e in events if e.event.value == "evaluation_done"]
    assert evaluations and all(evaluations)
    assert source.results and "exit code 1" in source.results[0]
    assert "AssertionError: -1 != 5" in source.results[0]
    [verdict] = [e.payload for e in events if e.event.value == "qa_verdict"]
    assert verdict.verdict == "ISSUES" and verdict.commands == 1
    assert state.stop.reason == StopReason.QA_REJECTED
    assert state.status == RunStatus.STOPPED
    # It ran where nothing reaches the run: the branch holds the producer's change and
    # QA's trajectory, nothing the test run left (__pycache__).
    listed = subprocess.run(
        ["git", "--git-dir", str(repo / ".git"), "ls-tree", "-r", "--name-only", state.branch],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "calc.py" in listed and not [p for p in listed if "__pycache__" in p]
