"""QA's verdict against what QA did (workflows/evidence.py), what QA's activity keeps of
the commands it ran (schemas/actions.py), and what the gates read of them from a
trajectory (agent/actions.py)."""

from __future__ import annotations

import pytest

from loopworks.agent.actions import commands_run
from loopworks.agent.trajectory import TrajectoryRecord
from loopworks.schemas.actions import CommandRun, last_cited_runs
from loopworks.schemas.roles import QAReport, QAVerdict
from loopworks.workflows.evidence import as_issues, judge

pytestmark = pytest.mark.unit

TESTS = "python3 -m unittest"


def verified(*evidence: str) -> QAReport:
    return QAReport(verdict=QAVerdict.VERIFIED, summary="all good", evidence=list(evidence))


def ran(command: str, code: int | None) -> CommandRun:
    return CommandRun(step="qa", command=command, exit_code=code)


def test_a_verified_citing_a_command_it_ran_that_passed_stands() -> None:
    judged = judge(verified(TESTS), [ran("ls", 0), ran(TESTS, 0)], ["calc.py"], [], [])
    assert judged.accepted and judged.reason == ""
    # Cited as a model writes it, in backticks with blanks around: the same command.
    assert judge(verified(f" `{TESTS}` "), [ran(TESTS, 0)], ["calc.py"], [], []).accepted


def test_a_verified_without_a_command_on_code_is_not_accepted() -> None:
    judged = judge(verified(), [], ["calc.py"], [], [])
    assert not judged.accepted
    assert "`calc.py`" in judged.reason and "cites no command" in judged.reason
    # A change that could not be read counts as code.
    assert not judge(verified(), [ran(TESTS, 0)], None, [], []).accepted


def test_a_document_task_needs_no_command() -> None:
    assert judge(verified(), [], [], [], []).accepted


def test_a_command_it_did_not_run_is_no_evidence() -> None:
    judged = judge(verified(TESTS), [ran("python3 -m unittest -v", 0)], ["calc.py"], [], [])
    assert not judged.accepted
    assert f"did not run in this step: `{TESTS}`" in judged.reason


@pytest.mark.parametrize("code", [1, None])
def test_a_command_that_did_not_exit_0_is_no_evidence(code: int | None) -> None:
    judged = judge(verified(TESTS), [ran(TESTS, code)], [], [], [])
    assert not judged.accepted and "did not exit 0" in judged.reason


def test_the_last_run_of_a_command_is_the_one_that_counts() -> None:
    assert judge(verified(TESTS), [ran(TESTS, 1), ran(TESTS, 0)], ["a.py"], [], []).accepted
    assert not judge(verified(TESTS), [ran(TESTS, 0), ran(TESTS, 1)], ["a.py"], [], []).accepted


def test_a_verified_after_its_commands_changed_the_checkout_is_not_accepted() -> None:
    """A QA that "fixes" the work with a command and then runs the tests: what they show is
    not the tree the run pushes."""
    fixed = [ran("sed -i 's/a - b/a + b/' calc.py", 0), ran(TESTS, 0)]
    judged = judge(verified(TESTS), fixed, ["calc.py"], ["calc.py"], [])
    assert not judged.accepted
    assert "changed files of your checkout (`calc.py`)" in judged.reason


def test_a_verified_the_proof_contradicts_is_not_accepted() -> None:
    judged = judge(verified(TESTS), [ran(TESTS, 0)], ["a.py"], [], ["`make test` (exit code 2)"])
    assert not judged.accepted and "`make test` (exit code 2)" in judged.reason


def test_issues_always_stand() -> None:
    report = QAReport(verdict=QAVerdict.ISSUES, summary="tests fail")
    assert judge(report, [], ["calc.py"], ["calc.py"], ["`x` (exit code 1)"]).accepted


def test_a_verdict_that_did_not_stand_counts_as_issues_with_its_reason() -> None:
    report = as_issues(verified(), "no command")
    assert report.verdict == QAVerdict.ISSUES
    [issue] = report.issues
    assert issue.rule_id == "qa" and "no command" in issue.problem
    assert "no command" in report.summary


def test_an_early_cited_run_is_kept_however_many_commands_ran_after_it() -> None:
    """QA's activity keeps, of the commands QA ran, the last run of each its evidence
    cites: a test run early in a long session is still what its verdict is checked
    against, and the commands it does not cite are not carried in the history."""
    session = [ran(TESTS, 1), ran(TESTS, 0), *(ran(f"cat f{n}.py", 0) for n in range(150))]
    session.append(ran("make lint", 2))
    kept = last_cited_runs([f"`{TESTS}`", "make lint", ""], session)
    assert kept == [ran(TESTS, 0), ran("make lint", 2)]
    assert judge(verified(TESTS), kept, ["calc.py"], [], []).accepted
    judged = judge(verified(TESTS, "make lint"), kept, ["calc.py"], [], [])
    assert not judged.accepted and "`make lint` (exit code 2)" in judged.reason
    # A cited command it never ran is left for the judge to name.
    assert last_cited_runs(["pytest"], session) == []


def test_the_commands_an_agent_ran_are_read_from_its_trajectory_with_their_exit_codes() -> None:
    """The gates read an agent's commands from its trajectory: the call and its result,
    paired by id; a call whose result went missing has no exit code."""

    def line(kind: str, tool_use_id: str, **fields: object) -> TrajectoryRecord:
        return TrajectoryRecord.model_validate(
            {
                "run_id": "r",
                "step": "qa",
                "iteration": 1,
                "turn": 1,
                "kind": kind,
                "tool": "run_command",
                "tool_use_id": tool_use_id,
                "ts": "2025-01-01T00:00:00Z",
                **fields,
            }
        )

    records = [
        line("tool_call", "a", input={"command": TESTS}),
        line("tool_result", "a", output="exit code 0\nOK", ok=True),
        line("tool_call", "b", input={"command": "true"}),
    ]
    found = commands_run(records)
    assert [(c.command, c.exit_code) for c in found] == [(TESTS, 0), ("true", None)]
    assert judge(verified(TESTS), found, ["a.py"], [], []).accepted
    assert not judge(verified("true"), found, ["a.py"], [], []).accepted
