"""What an agent did, as the gates are shown it (agent/actions.py reads it from a
trajectory), and what of QA's commands its verdict is checked against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field


class CommandRun(BaseModel):
    """One command an agent ran, as it ended: its exit code; or the timeout or the signal
    that ended it; or, when it never ran (refused), why."""

    step: str = Field(description="The step whose agent ran it: produce, refine, ...")
    command: str
    exit_code: int | None = Field(
        default=None,
        description="The exit code it ended with; none when it did not exit (timed out, "
        "killed by a signal) or never ran (refused).",
    )
    timed_out: bool = Field(default=False, description="Killed at its timeout.")
    signal: str | None = Field(
        default=None, description="The signal that killed it (`SIGKILL`, ...), when one did."
    )
    note: str = Field(
        default="", description="Why there is no exit code, when there is none: the result's line."
    )


def as_cited(command: str) -> str:
    """A command as cited or run, compared: surrounding blanks and backticks apart."""
    return command.strip().strip("`").strip()


def last_cited_runs(evidence: Sequence[str], ran: Sequence[CommandRun]) -> list[CommandRun]:
    """The last run of each command `evidence` cites, in the order they ran: what a
    verdict's evidence is checked against (the last run is the one that counts), bounded by
    the evidence, not by how many commands ran."""
    cited = {as_cited(command) for command in evidence} - {""}
    last = {as_cited(run.command): run for run in ran if as_cited(run.command) in cited}
    return [run for run in ran if last.get(as_cited(run.command)) is run]


class PendingCall(BaseModel):
    """The tool call an agent is about to make, when the custodiet audits during the work:
    a BLOCK refuses it."""

    step: str = Field(description="The step whose agent makes it: produce or refine.")
    tool: str = Field(description="The tool it calls.")
    input: dict[str, Any] = Field(
        description="Its arguments: a command whole, any other long text cut."
    )

    def brief(self) -> str:
        """`tool: its main argument`, one line, for events, the write-up and the agent."""
        main = next((self.input[k] for k in ("command", "path", "pattern") if k in self.input), "")
        text = " ".join(str(main).split())
        return f"{self.tool}: {text[:200]}" if text else self.tool


# Where a custodiet BLOCK writes the state of the work up, on the run's work ref.
BLOCKED_PATH = ".loops/blocked.md"


class AuditEvidence(BaseModel):
    """What an iteration did, as the custodiet is shown it: from git and the agents'
    trajectories, never from their own account."""

    diff_stat: str = ""
    commands_run: list[CommandRun] = Field(default_factory=list)
    files_written: list[str] = Field(default_factory=list)
    files_deleted: list[str] = Field(default_factory=list)
    declared_files: list[str] = Field(default_factory=list)
    outside_declared_files: list[str] = Field(default_factory=list)


def blocked_report(
    iteration: int,
    reason: str,
    violations: list[str],
    evidence: AuditEvidence,
    refused: PendingCall | None = None,
) -> str:
    """`.loops/blocked.md`: what was done, the violation with its evidence, and what a
    person should look at before clearing the block; for a block during the work, the tool
    call it refused."""
    lines = [f"# Blocked by the custodiet at iteration {iteration}", ""]
    lines += [reason or "The custodiet blocked the run without giving a reason.", ""]
    if refused is not None:
        lines += [
            f"During {refused.step}, before the agent's tool call `{refused.brief()}`: that "
            "call and every later one were refused, and the work so far is committed.",
            "",
        ]
    lines += ["## Violations", ""]
    lines += [f"- {v}" for v in violations] or ["- (none listed)"]
    lines += ["", "## What was done", ""]
    if evidence.diff_stat:
        lines += ["```", evidence.diff_stat, "```", ""]
    else:
        lines += ["No file changed since the iteration started.", ""]
    if evidence.commands_run:
        lines += ["Commands run:", ""]
        lines += [f"- `{c.command}` ({_ended(c)}, {c.step})" for c in evidence.commands_run]
        lines.append("")
    if evidence.files_deleted:
        lines += ["Files deleted: " + ", ".join(f"`{p}`" for p in evidence.files_deleted), ""]
    lines += ["## What to look at", ""]
    look = [f"- the violation: {v}" for v in violations]
    if evidence.outside_declared_files:
        declared = ", ".join(f"`{p}`" for p in evidence.declared_files)
        outside = ", ".join(f"`{p}`" for p in evidence.outside_declared_files)
        look.append(f"- changes outside the task's declared files ({declared}): {outside}")
    failed = [c for c in evidence.commands_run if c.exit_code != 0]
    if failed:
        look.append("- commands that failed: " + ", ".join(f"`{c.command}`" for c in failed))
    look.append(
        "- the iteration's diff and trajectory on the run's branch (`.loops/trajectory/`); "
        "then clear the block with a note, or stop the run"
    )
    lines += look
    return "\n".join(lines) + "\n"


def _ended(command: CommandRun) -> str:
    if command.exit_code is not None:
        return f"exit code {command.exit_code}"
    if command.signal is not None:
        return f"killed by {command.signal}"
    return command.note or ("timed out" if command.timed_out else "no exit code")
