"""Proof, not word: a run completes only on evidence the orchestrator checked, on a real
repository with real tests (docs/loop.md#the-runs-proof, docs/loop.md#qas-evidence).

The producer is scripted to break a test (`return a + b` becomes `return a - b`) and to
write an artifact that says every test passes; QA is a scripted model that says VERIFIED
without running anything, or "fixes" the code in its checkout first, or runs the tests
and cites them. Only the model's answers are scripted: the commands, the git and the
workflow are real.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.schemas.events import Event
from loopworks.schemas.proof import PROOF_FILE, ProofSource, ProofStatus
from loopworks.schemas.roles import Role
from loopworks.schemas.rules import CommandCheck, RuleOwner
from loopworks.schemas.run import Approval, RunState, RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.worker.build import build_worker
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import LoopHarness, commit_all
from tests.workflows.test_loop import TITLE_RULE, remote_file, wait_for
from tests.workflows.test_production import CommandFirst

pytestmark = pytest.mark.workflow

CALC = "def add(a, b):\n    return a + b\n"
TEST_CALC = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
# What the repository plainly uses: test modules in tests/, no package (checks/proof.py).
DETECTED = "python3 -m unittest discover -s tests"
CLAIM = "# Faster add\n\nRewrote add; all tests pass.\n"
BROKEN = {
    "files": [
        {"path": "calc.py", "content": "def add(a, b):\n    return a - b\n"},
        {"path": "artifact.md", "content": CLAIM},
    ],
    "summary": "Rewrote add; all tests pass.",
}
CORRECT = {
    "files": [
        {"path": "calc.py", "content": CALC + "\n\ndef mul(a, b):\n    return a * b\n"},
        {"path": "artifact.md", "content": "# Multiplication\n\nAdded mul beside add.\n"},
    ],
    "summary": "Added mul.",
}
DOCUMENT = {"files": [{"path": "artifact.md", "content": "# Notes\n\nHow add works.\n"}]}
FIX = "sed -i 's/a - b/a + b/' calc.py"
# Not a change to a tracked file: a new module beside the tests, found first on their path.
SHADOW = "printf 'def add(a, b):\\n    return a + b\\n' > tests/calc.py"


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    """A user's repository with a module and a unittest test of it under tests/."""
    repo = tmp_path / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TEST_CALC)
    commit_all(repo)
    return repo


@dataclass
class Verifier:
    """A ModelSource whose QA verifier runs `commands` (once each, in order) and then gives
    `report`, citing `cite`; every other role is the offline model's, as scripted."""

    offline: OfflineModels
    commands: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)
    asked: int = 0
    contexts: list[str] = field(default_factory=list)
    strict_output = False

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> Model:
        if call.role != Role.QA_VERIFIER:
            return self.offline.model(call)
        return FunctionModel(self.verify, model_name="verifier")

    def verify(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        ran = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "run_command"
        ]
        if len(ran) < len(self.commands):
            command = self.commands[len(ran)]
            return ModelResponse(parts=[ToolCallPart("run_command", {"command": command})])
        self.asked += 1
        self.contexts.append(str(messages[0]))
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, self.report)])


def verifier(harness: LoopHarness, producer: dict[str, Any], **qa: Any) -> tuple[Verifier, Any]:
    source = Verifier(
        OfflineModels(script=OfflineScript.model_validate({"producer": {"*": producer}})), **qa
    )
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir, LOOPS_TASK_QUEUE=harness.task_queue, LOOPS_LLM="offline"
    )
    return source, build_worker(harness.env.client, settings, models=source)


def qa_verdicts(events: list[Event]) -> list[Any]:
    return [e.payload for e in events if e.event.value == "qa_verdict"]


def shipped(repo: Path, state: RunState, path: str) -> str:
    return remote_file(repo / ".git", state.branch, path)


async def run(
    harness: LoopHarness, worker: Any, repo: Path, **request: Any
) -> tuple[RunState, list[Event]]:
    request.setdefault("max_iterations", 2)
    async with worker:
        handle = await harness.start(
            task="Make add faster", repo=str(repo), rules=[TITLE_RULE], **request
        )
        state = (await handle.result()).state
        events = await harness.events(handle)
    return state, events


SAYS_VERIFIED = {"verdict": "VERIFIED", "summary": "Looks right; every test passes."}


# --- the done-when runs ---------------------------------------------------------------------


async def test_a_broken_change_a_verified_without_running_anything_never_completes(
    harness: LoopHarness, calc_repo: Path
) -> None:
    """The repository's own tests, found in it, run on the work the run would push: they
    fail, so the run never reaches QA's word, whatever the artifact claims."""
    source, worker = verifier(harness, BROKEN, report=SAYS_VERIFIED)
    state, events = await run(harness, worker, calc_repo)

    assert state.status != RunStatus.COMPLETED and not state.stop.passed
    assert state.stop_reason in (StopReason.ITERATION_LIMIT, StopReason.STAGNATION)
    assert state.proof is not None
    assert (state.proof.source, state.proof.commands) == (ProofSource.DETECTED, [DETECTED])
    assert state.proof.status == ProofStatus.FAILED
    [result] = state.proof.results
    assert result.exit_code == 1 and "AssertionError: -1 != 5" in result.detail
    # It ran on the tree the run pushed: the branch ships the change it failed on.
    assert "a - b" in shipped(calc_repo, state, "calc.py")
    assert (
        state.proof.commit
        and shipped(calc_repo, state, "calc.py")
        == subprocess.run(
            ["git", "-C", str(calc_repo), "show", f"{state.proof.commit}:calc.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    proof_rule = next(r for r in state.rules if r.id == "proof-1")
    assert proof_rule.owner == RuleOwner.ORCHESTRATOR and proof_rule.phase.value == "B"
    assert source.asked == 0 and qa_verdicts(events) == []


async def test_a_verified_without_a_command_is_asked_again_then_counts_as_issues(
    harness: LoopHarness, calc_repo: Path
) -> None:
    """With no proof of the run's own (`verify: []`, allowed), QA's word is all there is:
    a VERIFIED on changed code that cites no command it ran does not stand."""
    source, worker = verifier(harness, BROKEN, report=SAYS_VERIFIED)
    state, events = await run(
        harness, worker, calc_repo, verify=[], allow_unverified=True, max_iterations=1
    )

    assert state.status == RunStatus.STOPPED and state.stop_reason == StopReason.QA_REJECTED
    assert "cites no command" in state.stop.message
    first, second = qa_verdicts(events)
    assert first.verdict == "VERIFIED" and not first.accepted and "`calc.py`" in first.rejected
    assert second.verdict == "VERIFIED" and not second.accepted
    # Asked again with the reason, in a trajectory of its own.
    assert source.asked == 2 and "Rejected Verdict" in source.contexts[1]
    assert "cites no command" in source.contexts[1]
    assert state.verdicts.qa is not None and state.verdicts.qa.verdict.value == "ISSUES"
    qa_files = subprocess.run(
        [
            "git",
            "-C",
            str(calc_repo),
            "ls-tree",
            "--name-only",
            f"{state.branch}:.loops/trajectory",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"01-qa.jsonl", "01-qa-2.jsonl"} <= set(qa_files)


@pytest.mark.parametrize(
    ("proven", "fix", "changed"),
    [
        (True, FIX, "calc.py"),
        (False, FIX, "calc.py"),
        # A file it adds beside the tests shadows the broken module on their path.
        (False, SHADOW, "tests/calc.py"),
    ],
    ids=["proof", "qa-alone", "qa-alone-shadowing"],
)
async def test_a_verifier_that_fixes_the_code_in_its_checkout_never_completes(
    harness: LoopHarness, calc_repo: Path, proven: bool, fix: str, changed: str
) -> None:
    """QA "fixes" the broken code with a command, runs the tests (they pass, there) and
    cites them. Its fix is never pushed nor taken as the fix: the run's proof fails on the
    work; and without one, its commands changed the checkout, so its VERIFIED does not
    stand."""
    report = {**SAYS_VERIFIED, "evidence": [DETECTED]}
    source, worker = verifier(harness, BROKEN, commands=[fix, DETECTED], report=report)
    extra: dict[str, Any] = {} if proven else {"verify": [], "allow_unverified": True}
    state, events = await run(harness, worker, calc_repo, max_iterations=1, **extra)

    assert state.status != RunStatus.COMPLETED and not state.stop.passed
    assert "a - b" in shipped(calc_repo, state, "calc.py")
    if proven:
        assert state.proof is not None and state.proof.status == ProofStatus.FAILED
        assert source.asked == 0
    else:
        assert state.stop_reason == StopReason.QA_REJECTED
        assert all(not v.accepted for v in qa_verdicts(events))
        assert f"changed files of your checkout (`{changed}`)" in qa_verdicts(events)[0].rejected


async def test_a_correct_change_and_a_verifier_citing_a_passing_command_completes(
    harness: LoopHarness, calc_repo: Path
) -> None:
    report = {**SAYS_VERIFIED, "evidence": [DETECTED]}
    source, worker = verifier(harness, CORRECT, commands=[DETECTED], report=report)
    state, events = await run(harness, worker, calc_repo)

    assert state.status == RunStatus.COMPLETED, state.stop
    assert state.stop_reason == StopReason.THRESHOLD_REACHED
    assert state.proof is not None and state.proof.status == ProofStatus.PASSED
    assert state.proof.changed_code == ["calc.py"]
    [result] = state.proof.results
    assert (result.command, result.exit_code, result.passed) == (DETECTED, 0, True)
    [verdict] = qa_verdicts(events)
    assert verdict.accepted and verdict.evidence == [DETECTED] and verdict.commands == 1
    assert "def mul" in shipped(calc_repo, state, "calc.py")
    # QA was shown the proof and its result.
    assert "## Proof" in source.contexts[0] and DETECTED in source.contexts[0]


# --- no proof ----------------------------------------------------------------------------------


async def test_code_with_an_empty_verify_ends_unverified(
    harness: LoopHarness, calc_repo: Path
) -> None:
    report = {**SAYS_VERIFIED, "evidence": [DETECTED]}
    _, worker = verifier(harness, CORRECT, commands=[DETECTED], report=report)
    state, _ = await run(harness, worker, calc_repo, verify=[])

    assert state.status == RunStatus.STOPPED and state.stop_reason == StopReason.UNVERIFIED
    assert "calc.py" in state.stop.message and "`verify`" in state.stop.message
    assert state.proof is not None
    assert (state.proof.source, state.proof.commands) == (ProofSource.REQUEST, [])
    assert state.proof.status == ProofStatus.UNVERIFIED
    assert not [r for r in state.rules if r.owner == RuleOwner.ORCHESTRATOR]


async def test_an_unverified_run_completes_when_its_request_allows_it(
    harness: LoopHarness, calc_repo: Path
) -> None:
    report = {**SAYS_VERIFIED, "evidence": [DETECTED]}
    _, worker = verifier(harness, CORRECT, commands=[DETECTED], report=report)
    state, _ = await run(harness, worker, calc_repo, verify=[], allow_unverified=True)

    assert state.status == RunStatus.COMPLETED
    assert state.proof is not None and state.proof.status == ProofStatus.UNVERIFIED


async def test_a_document_task_needs_no_proof(harness: LoopHarness, calc_repo: Path) -> None:
    """Only the artifact changed: the detected tests are not run, and QA needs cite nothing."""
    _, worker = verifier(harness, DOCUMENT, report=SAYS_VERIFIED)
    state, events = await run(harness, worker, calc_repo)

    assert state.status == RunStatus.COMPLETED
    assert state.proof is not None and state.proof.status == ProofStatus.NOT_NEEDED
    [result] = state.proof.results
    assert result.passed and result.detail.startswith("nothing to prove")
    [verdict] = qa_verdicts(events)
    assert verdict.accepted and verdict.evidence == []


async def test_the_repositorys_declaration_is_its_proof(
    harness: LoopHarness, tmp_path: Path
) -> None:
    """`.loops/verify` at the base commit names the proof, over what detection would find;
    the offline verifier runs it and cites it."""
    repo = tmp_path / "declared"
    (repo / ".loops").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST_CALC)
    (repo / ".loops" / "verify").write_text("# the checks\npython3 -m unittest -q test_calc\n")
    commit_all(repo)
    async with harness.worker(script={"producer": {"*": CORRECT}}):
        handle = await harness.start(task="Add mul", repo=str(repo), rules=[TITLE_RULE])
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED, state.stop
    assert state.proof is not None and state.proof.source == ProofSource.REPOSITORY
    assert state.proof.commands == ["python3 -m unittest -q test_calc"]
    assert state.proof.status == ProofStatus.PASSED
    [verdict] = qa_verdicts(events)
    assert verdict.evidence == state.proof.commands and verdict.accepted


async def test_a_command_that_rewrites_the_declaration_never_ships_it(
    harness: LoopHarness, tmp_path: Path
) -> None:
    """`.loops/verify` is the run's record, not its work: what a PRODUCE's command wrote
    there is put back before the step commits, so no gate has to see it (they leave the
    records out) and the branch a later run starts from declares what the repository did."""
    repo = tmp_path / "declared"
    (repo / ".loops").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST_CALC)
    declared = "python3 -m unittest -q test_calc\n"
    (repo / PROOF_FILE).write_text(declared)
    commit_all(repo)
    models = CommandFirst(f"printf 'true\\n' > {PROOF_FILE}", {"producer": {"*": CORRECT}})
    async with harness.worker(models=models):
        handle = await harness.start(task="Add mul", repo=str(repo), rules=[TITLE_RULE])
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED, state.stop
    assert state.proof is not None and state.proof.status == ProofStatus.PASSED
    assert shipped(repo, state, PROOF_FILE) == declared
    assert "def mul" in shipped(repo, state, "calc.py")
    # The changed paths a step reports, and the gates read, never named it either.
    changed = [e.payload.changed for e in events if e.event.value == "artifact_created"]
    assert changed and all(PROOF_FILE not in paths for paths in changed)


# --- the plan, and who may change the proof ------------------------------------------------------


async def test_the_plan_shows_the_detected_proof_and_the_person_may_edit_it(
    harness: LoopHarness, calc_repo: Path
) -> None:
    """Confirm first: the draft a person approves names the proof (and holds its rule);
    the approval may set other commands, which become the run's proof and rules."""
    declared = "python3 -m unittest discover -s tests -q"
    async with harness.worker(script={"producer": {"*": CORRECT}}):
        handle = await harness.start(
            task="Add mul", repo=str(calc_repo), rules=[TITLE_RULE], mode="interactive"
        )

        async def awaiting() -> bool:
            return (await harness.status(handle)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(awaiting)
        draft = await harness.status(handle)
        assert draft.proof is not None
        assert (draft.proof.source, draft.proof.commands) == (ProofSource.DETECTED, [DETECTED])
        assert "tests/" in draft.proof.basis and draft.proof.status == ProofStatus.PENDING
        assert [r.id for r in draft.rules] == ["has-title", "proof-1"]
        approved = await handle.execute_update(LoopWorkflow.approve, Approval(verify=[declared]))
        assert approved.proof is not None and approved.proof.commands == [declared]
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.status == RunStatus.COMPLETED, state.stop
    assert state.proof is not None and state.proof.source == ProofSource.REQUEST
    [result] = state.proof.results
    assert (result.command, result.passed) == (declared, True)
    proof_rule = next(r for r in state.rules if r.id == "proof-1")
    assert isinstance(proof_rule.check, CommandCheck) and proof_rule.check.command == declared
    [approval] = [e.payload for e in events if e.event.value == "approved"]
    assert approval.edits == {"verify": [declared]}


async def test_a_hydration_that_forges_the_proof_rule_gets_the_runs_own_back(
    harness: LoopHarness, calc_repo: Path
) -> None:
    """The hydrator drafts a `proof-1` of its own that always passes, and a rule claiming
    the orchestrator: neither stands, the broken change still fails the real proof."""
    forged = {
        "id": "proof-1",
        "description": "The tests pass",
        "severity": "fail",
        "phase": "B",
        "check": {"kind": "command", "command": "true"},
    }
    claiming = {**TITLE_RULE, "id": "mine", "owner": "orchestrator"}
    hydration = {
        "template": "minor-edit",
        "intent": "add is faster",
        "plan": ["rewrite add"],
        "acceptance_criteria": ["the tests pass"],
        "rules": [TITLE_RULE, forged, claiming],
    }
    script = {"producer": {"*": BROKEN}, "hydrator": {"*": hydration}}
    async with harness.worker(script=script):
        handle = await harness.start(task="Make add faster", repo=str(calc_repo), max_iterations=1)
        state = (await handle.result()).state

    assert state.status != RunStatus.COMPLETED
    assert [r.id for r in state.rules] == ["has-title", "proof-1"]
    proof_rule = state.rules[-1]
    assert proof_rule.owner == RuleOwner.ORCHESTRATOR
    assert isinstance(proof_rule.check, CommandCheck) and proof_rule.check.command == DETECTED
    assert state.proof is not None and state.proof.status == ProofStatus.FAILED
