"""The compact iteration summary, as plain text (docs/loop.md#iteration-summary).

The workflow shows it as its current details in the Temporal UI; the CLI prints it.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class IterationSummary(BaseModel):
    iteration: int
    max_iterations: int
    phase: str
    score: float
    passed: bool
    plan_focus: str = ""
    artifact_hash: str = ""
    changed: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    artifact: str = ""
    critique: list[tuple[str, str]] = Field(default_factory=list)


def render_summary(summary: IterationSummary) -> str:
    verdict = "PASS" if summary.passed else "FAIL"
    lines = [
        f"── Iteration {summary.iteration}/{summary.max_iterations} | Phase {summary.phase} "
        f"| Score: {summary.score:.2f} | {verdict} ──",
        f"Plan: {summary.plan_focus or '-'}",
        f"Hash: {summary.artifact_hash[:8] or '-'}",
        f"Changed: {', '.join(summary.changed) or 'none'}",
        f"Failed: {', '.join(summary.failed) or 'none'}",
        f"Warnings: {', '.join(summary.warnings) or 'none'}",
        f"Artifact: {summary.artifact or '-'}",
    ]
    if not summary.passed and summary.critique:
        lines.append("Critique:")
        lines.extend(f"  {rule_id}: {fix}" for rule_id, fix in summary.critique)
    return "\n".join(lines)
