"""What the CLI prints: the status line, the runs table, the event timeline, the iteration
summaries (rebuilt from events; docs/loop.md#iteration-summary) and the final summary.

Everything reads the API's models (`RunState`, `RunSummary`, the typed events), and
returns text or a rich renderable, so it is tested without a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from loopworks.api.models import RunSummary
from loopworks.cli.blocked import blocked_notes
from loopworks.schemas.events import (
    Approved,
    ArtifactCreated,
    AuditVerdictGiven,
    BlockCleared,
    Blocked,
    ChecksPrepared,
    CriticVerdictGiven,
    CritiqueDone,
    Curated,
    EvaluationDone,
    Event,
    EventName,
    Failed,
    HydrationDone,
    IterationAdvanced,
    PhaseError,
    PhaseSwitched,
    PlanCreated,
    PlaybookLoaded,
    PlaybookUpdated,
    Pushed,
    QAVerdictGiven,
    RefinementDone,
    ReflectionDone,
    RunStarted,
    SkillLoopDone,
    Stopped,
)
from loopworks.schemas.run import RunState, RunStatus
from loopworks.schemas.summary import IterationSummary, render_summary

ARTIFACT_FILE = "artifact.md"
# Off a terminal nobody's window limits the width: a piped table keeps each run on one
# line however long its id, instead of rich's 80-column default.
PIPE_WIDTH = 1_000


def console_for(out: TextIO) -> Console:
    """A console for `out`: styles and the spinner on a terminal, plain text otherwise.

    What the API sent is printed as is: no markup (a task may contain `[brackets]`),
    no emoji codes, no highlighting, and long lines are not re-wrapped.
    """
    tty = out.isatty()
    return Console(
        file=out,
        force_terminal=tty,
        width=None if tty else PIPE_WIDTH,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=True,
    )


def score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def timestamp(value: datetime | str | None, time_only: bool = False) -> str:
    """ISO timestamps in UTC to the second (`2026-02-18T12:00:00Z`); anything else as is."""
    if not value:
        return "-"
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC)
    return parsed.strftime("%H:%M:%S" if time_only else "%Y-%m-%dT%H:%M:%SZ")


def artifact_location(state: RunState) -> str:
    return f"{state.branch}:{ARTIFACT_FILE}" if state.branch else ""


def stop_reason(state: RunState) -> str | None:
    reason = state.stop_reason or state.stop.reason
    return reason.value if reason else None


# --- status -------------------------------------------------------------------------


def status_line(state: RunState) -> str:
    """`alias | status | iteration | phase | current_step | last_score | updated_at`."""
    return " | ".join(
        [
            state.alias or state.run_id,
            state.status.value,
            f"{state.iteration}/{state.max_iterations}",
            state.phase.value,
            state.current_step.value,
            score(state.last_score),
            timestamp(state.updated_at),
        ]
    )


def status_notes(state: RunState) -> list[str]:
    """What a person needs next: why it stopped, or what it waits for and the command."""
    run_id = state.run_id
    if state.status.is_terminal:
        reason, message = stop_reason(state), state.stop.message
        if reason is None:
            # Failed without reaching a stop condition (git, a step out of retries,
            # terminated from outside): what went wrong is all there is to say.
            return [f"{state.status.value}: {message}" if message else state.status.value]
        return [f"stop: {reason} ({message})" if message else f"stop: {reason}"]
    if state.status == RunStatus.BLOCKED:
        return blocked_notes(state)
    if state.status == RunStatus.AWAITING_APPROVAL:
        return [f"awaiting approval (approve with: loops approve {run_id})"]
    if state.status == RunStatus.PAUSED:
        return [f"paused (continue with: loops resume {run_id})"]
    return []


def model_line(state: RunState) -> str | None:
    """Which model answers the run: one on the offline model's canned answers says so
    (None for a run recorded before runs named it)."""
    return f"model: {state.model_source}" if state.model_source else None


# --- list ---------------------------------------------------------------------------

# BY: the name of the API token that started the run (`local` when the API is open).
LIST_COLUMNS = ("RUN_ID", "ALIAS", "STATUS", "ITER", "SCORE", "STARTED", "BY")


def list_table(runs: Iterable[RunSummary]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in LIST_COLUMNS:
        # A run id is what people copy: folded onto a second line, never cut short.
        table.add_column(name, no_wrap=True, overflow="fold" if name == "RUN_ID" else "ellipsis")
    for run in runs:
        cells = (
            run.run_id,
            run.alias or "-",
            run.status.value + (" (blocked)" if run.blocked else ""),
            "-" if run.iteration is None else str(run.iteration),
            score(run.last_score),
            timestamp(run.started_at),
            run.started_by or "-",
        )
        # Text, not str: a cell is shown as sent, never read as rich markup.
        table.add_row(*(Text(cell) for cell in cells))
    return table


# --- history ------------------------------------------------------------------------


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _ids(items: Iterable[str]) -> str:
    return ", ".join(items) or "none"


def event_detail(event: Event) -> str:
    """One phrase per event, in the terms the iteration summary uses."""
    match event:
        case RunStarted(payload=p):
            return _short(p.task)
        case HydrationDone(payload=p):
            return f"template {p.template}, rules: {_ids(p.rules)}"
        case CriticVerdictGiven(payload=p):
            return _verdict(p.verdict, ", ".join(p.issues))
        case AuditVerdictGiven(payload=p):
            return _verdict(p.verdict, p.reason or ", ".join(p.violations))
        case QAVerdictGiven(payload=p):
            return _verdict(p.verdict, p.summary or ", ".join(i.rule_id for i in p.issues))
        case PlanCreated(payload=p):
            return _short(p.focus)
        case ArtifactCreated(payload=p) | RefinementDone(payload=p):
            return f"hash {p.hash[:8]}, changed: {_ids(p.changed)}"
        case ChecksPrepared(payload=p):
            again = ", as before (same rules)" if p.reused else ""
            return f"{p.checks} checks for {len(p.rules)} rules{again}"
        case EvaluationDone(payload=p):
            verdict = "PASS" if p.passed else "FAIL"
            known = f" ({p.reused} checks known on this commit)" if p.reused else ""
            late = f", unchecked (check budget spent): {_ids(p.unchecked)}" if p.unchecked else ""
            return (
                f"score {score(p.score)} / {score(p.threshold)} {verdict},"
                f" failed: {_ids(p.failed)}, warnings: {_ids(p.warnings)}{late}{known}"
            )
        case CritiqueDone(payload=p):
            noun = "issue" if len(p.issues) == 1 else "issues"
            return f"{len(p.issues)} {noun}: {_ids(i.rule_id for i in p.issues)}"
        case PhaseSwitched(payload=p):
            return f"{p.from_phase} → {p.to_phase}"
        case IterationAdvanced(payload=p):
            return f"→ iteration {p.iteration}"
        case PhaseError(payload=p):
            return f"{p.step}: {_short(p.error, 70)}"
        case Stopped(payload=p):
            return _short(f"{p.reason} ({p.message})" if p.message else p.reason)
        case Failed(payload=p):
            what = p.reason or p.error
            return _short(f"{what} ({p.message})" if p.message else what)
        case Blocked(payload=p):
            where = "" if p.during == "audit" else f" (during {p.during}, refused {p.refused})"
            return _short(f"{p.reason or 'no reason given'}{where}")
        case BlockCleared(payload=p):
            return _short(f"note: {p.note}")
        case ReflectionDone(payload=p):
            return f"outcome: {p.outcome}"
        case Pushed(payload=p):
            verified = "verified" if p.verified else "NOT verified"
            return f"{p.branch} @ {p.commit[:8]} ({verified})"
        case Approved(payload=p):
            return "as drafted" if not p.edits else _short("edited: " + json.dumps(p.edits))
        case PlaybookLoaded(payload=p):
            pinned = ", pinned" if p.pinned else ""
            return f"{p.name} v{p.version}{pinned}, items: {_ids(p.item_ids)}"
        case Curated(payload=p):
            asked = [*p.python_helpers, *p.reference_requests]
            return _short(f"{p.proposed_updates} updates, asked for: {_ids(asked)}; {p.summary}")
        case SkillLoopDone(payload=p):
            if p.error:
                return _short(f"failed: {p.error}")
            return f"kept: {_ids(p.accepted)}, rejected: {_ids(p.rejected)}"
        case PlaybookUpdated(payload=p):
            if not p.changed:
                return f"{p.name}: nothing changed"
            results = ", ".join(f"{n} {result}" for result, n in p.results.items())
            return _short(f"{p.name} v{p.version}: {results or 'pruned only'}")
    # The rest (paused, resumed, continued_as_new, output_repaired): their payload as sent.
    payload = event.payload.model_dump_json()
    return "" if payload == "{}" else _short(payload)


def _verdict(verdict: str, extra: str) -> str:
    return verdict + (f": {_short(extra, 70)}" if extra else "")


def history_line(event: Event) -> str:
    mark = "!" if event.status != "ok" else " "
    return (
        f"{event.seq:>4} {mark} {timestamp(event.ts, time_only=True)}"
        f"  it {event.iteration} {event.phase}"
        f"  {event.step:<15} {event.event:<18} {event_detail(event)}"
    ).rstrip()


def notice(event: Event) -> str | None:
    """Events a person following a run should see as they happen, beside the summaries."""
    match event:
        case Blocked():
            # The verdict's own event says it again: the `blocked` one is the notice.
            return f"! custodiet BLOCK: {event_detail(event)}"
        case CriticVerdictGiven(payload=p) if p.verdict != "PROCEED":
            return f"! critic {p.verdict}: {', '.join(p.issues) or '-'}"
        case Failed():
            return f"! failed: {event_detail(event)}"
    if event.event in NOTICED:
        return f"· {event.event}: {event_detail(event)}".rstrip(": ")
    return None


NOTICED = frozenset(
    {
        EventName.BLOCK_CLEARED,
        EventName.APPROVED,
        EventName.PAUSED,
        EventName.RESUMED,
        EventName.PHASE_ERROR,
    }
)


# --- iteration summaries from events -------------------------------------------------


class IterationTracker:
    """Rebuilds the iteration summaries from the event stream, one per evaluated phase.

    An iteration's summary is complete when the loop moves on: `phase_switched` closes
    phase A's evaluation (B re-evaluates the same artifact), `iteration_advanced` closes
    the iteration after critique and refine, and `stopped` / `failed` close the last one.
    The hash shown is the evaluated artifact's, not the refinement that follows it.
    """

    def __init__(self, max_iterations: int, artifact: str = "") -> None:
        self.max_iterations = max_iterations
        self.artifact = artifact
        self._plan_focus = ""
        self._artifact_hash = ""
        self._changed: list[str] = []
        self._evaluation: EvaluationDone | None = None
        self._evaluated: tuple[str, list[str]] = ("", [])
        self._critique: list[tuple[str, str]] = []

    def feed(self, event: Event) -> list[IterationSummary]:
        match event:
            case Approved(payload=p):
                edited = p.edits.get("max_iterations")
                if isinstance(edited, int):
                    self.max_iterations = edited
            case PlanCreated(payload=p):
                self._plan_focus = p.focus
            case ArtifactCreated(payload=p) | RefinementDone(payload=p):
                self._artifact_hash = p.hash
                self._changed = list(p.changed)
            case EvaluationDone():
                self._evaluation = event
                self._evaluated = (self._artifact_hash, list(self._changed))
                self._critique = []
            case CritiqueDone(payload=p):
                self._critique = [(issue.rule_id, issue.fix) for issue in p.issues]
            case PhaseSwitched() | IterationAdvanced() | Stopped() | Failed():
                return self.finish()
        return []

    def finish(self) -> list[IterationSummary]:
        evaluation, self._evaluation = self._evaluation, None
        if evaluation is None:
            return []
        artifact_hash, changed = self._evaluated
        result = evaluation.payload
        return [
            IterationSummary(
                iteration=evaluation.iteration,
                max_iterations=self.max_iterations,
                phase=evaluation.phase.value,
                score=result.score,
                passed=result.passed,
                plan_focus=self._plan_focus,
                artifact_hash=artifact_hash,
                changed=changed,
                failed=list(result.failed),
                warnings=list(result.warnings),
                artifact=self.artifact,
                critique=self._critique,
            )
        ]


def iteration_summaries(events: Iterable[Event], max_iterations: int, artifact: str) -> list[str]:
    tracker = IterationTracker(max_iterations, artifact)
    summaries = [summary for event in events for summary in tracker.feed(event)]
    summaries.extend(tracker.finish())
    return [render_summary(summary) for summary in summaries]


# --- the final summary: how the run ended (docs/loop.md#stop-reasons) -----------------


def final_summary(state: RunState) -> str:
    lines = [
        f"══ Run {state.run_id} {state.status.value} ══",
        f"Iteration: {state.iteration}/{state.max_iterations}",
        f"Phase: {state.phase.value}",
        f"Final score: {score(state.last_score)}",
        f"Stop reason: {stop_reason(state) or 'none'}",
    ]
    if state.stop.message:
        lines.append(f"Message: {state.stop.message}")
    distance = state.stop.distance_to_success
    if distance:
        lines += [
            "distance_to_success:",
            f"  threshold (phase {distance.phase.value}): {score(distance.threshold)}"
            f" | score: {score(distance.score)} | gap: {score(distance.gap)}",
            f"  failed fail-rules: {distance.failed_blocker_count}"
            f" ({_ids(distance.blocking_rule_ids)})",
            f"  rules passed: {distance.passed_rules}/{distance.total_rules}",
        ]
    location = artifact_location(state)
    if location and state.artifact_commit:
        lines.append(f"Artifact: {location}" + (f" on {state.origin}" if state.origin else ""))
    return "\n".join(lines)
