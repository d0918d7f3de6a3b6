"""QA's verdict against what QA did (docs/loop.md#qas-evidence): a `VERIFIED` names the
commands that support it, and they are checked against the commands QA really ran (as
its command tool ran them, whole, with their exit codes), the tree they ran on, and the
orchestrator's own proof. Plain functions: the workflow calls them, the tests call them alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loopworks.schemas.actions import CommandRun, as_cited
from loopworks.schemas.roles import Issue, QAReport, QAVerdict

# The rule id of a problem with QA's own evidence (as QA's issues outside every rule).
QA_RULE = "qa"
# How many names a reason lists before it counts the rest.
SHOWN = 5


@dataclass(frozen=True)
class Judgement:
    """Whether QA's verdict stands, and if not, why: what QA is told when asked again,
    and the issue it becomes after that."""

    accepted: bool
    reason: str = ""


ACCEPTED = Judgement(accepted=True)


def judge(
    report: QAReport,
    ran: Sequence[CommandRun],
    code_changed: Sequence[str] | None,
    checkout_changed: Sequence[str],
    proof_failed: Sequence[str],
) -> Judgement:
    """Whether QA's verdict stands on its evidence.

    `ISSUES` always stands: it takes nothing on QA's word but more work. A `VERIFIED` does
    not when the orchestrator's proof failed on the same work (`proof_failed`), when QA's
    commands changed or added a file of its checkout (what they showed is not the tree the
    run pushes), when a command it cites is not one it ran or did not exit 0, or when it
    cites none on a run that changed code (`code_changed`; None: not known, so changed).
    """
    if report.verdict != QAVerdict.VERIFIED:
        return ACCEPTED
    if proof_failed:
        return Judgement(
            False,
            "the run's proof failed on this work: " + _listed(proof_failed) + "; a VERIFIED "
            "cannot stand against it",
        )
    if checkout_changed:
        changed = _listed(checkout_changed, "`")
        return Judgement(
            False,
            f"your commands changed files of your checkout ({changed}): what they showed is "
            "not the work the run pushes, and nothing you change is ever the run's; verify "
            "the work as it is, without changing it",
        )
    last = {as_cited(run.command): run for run in ran}
    cited = [c for c in (as_cited(e) for e in report.evidence) if c]
    unknown = [c for c in cited if c not in last]
    if unknown:
        return Judgement(
            False,
            "your evidence names commands you did not run in this step: "
            + _listed(unknown, "`")
            + "; cite only commands you ran with the command tool, exactly as you ran them",
        )
    failed = [c for c in cited if last[c].exit_code != 0]
    if failed:
        return Judgement(
            False,
            "commands your evidence names did not exit 0: "
            + _listed([f"`{c}` ({_ended(last[c])})" for c in failed])
            + "; a VERIFIED rests on commands that passed",
        )
    if not cited and (code_changed is None or code_changed):
        changed = _listed(code_changed, "`") if code_changed else "its change could not be read"
        return Judgement(
            False,
            f"the run changed code ({changed}) and your VERIFIED cites no command you ran: "
            "run what proves the change (its tests) and name those commands in `evidence`",
        )
    return ACCEPTED


def as_issues(report: QAReport, reason: str) -> QAReport:
    """A verdict that did not stand after QA was asked again: it counts as `ISSUES`, the
    reason its issue."""
    issue = Issue(
        rule_id=QA_RULE,
        problem=f"QA's VERIFIED was not accepted: {reason}",
        fix="make the work pass the commands that prove it, and leave the proof to them",
    )
    summary = f"QA's verdict did not stand on its evidence: {reason}"
    return report.model_copy(
        update={"verdict": QAVerdict.ISSUES, "issues": [*report.issues, issue], "summary": summary}
    )


def _listed(items: Sequence[str], quote: str = "") -> str:
    shown = [f"{quote}{item}{quote}" for item in items[:SHOWN]]
    more = len(items) - SHOWN
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _ended(run: CommandRun) -> str:
    if run.exit_code is not None:
        return f"exit code {run.exit_code}"
    return run.note or "no exit code"
