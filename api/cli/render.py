"""Text the CLI prints: the status line, the runs table, the event timeline, seed 001
Step 8's iteration summaries (rebuilt from events) and Step 7's final summary.

Everything here takes the API's JSON as plain mappings, so an API that adds fields or
event names never breaks the CLI; everything returns strings, so it is tested without
a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from loopworks.schemas.run import TERMINAL_STATUSES
from loopworks.workflows.summary import IterationSummary, render_summary

Json = Mapping[str, Any]

TERMINAL = frozenset(status.value for status in TERMINAL_STATUSES)
ARTIFACT_FILE = "artifact.md"


def is_terminal(state: Json) -> bool:
    return str(state.get("status")) in TERMINAL


def score(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, int | float) else "-"


def timestamp(value: Any, time_only: bool = False) -> str:
    """ISO timestamps in UTC to the second (`2026-02-18T12:00:00Z`); anything else as is."""
    if not value:
        return "-"
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC)
    return parsed.strftime("%H:%M:%S" if time_only else "%Y-%m-%dT%H:%M:%SZ")


def artifact_location(state: Json) -> str:
    branch = state.get("branch")
    return f"{branch}:{ARTIFACT_FILE}" if branch else ""


# --- status -------------------------------------------------------------------------


def status_line(state: Json) -> str:
    """Seed 001's `alias | status | iteration | phase | current_step | last_score | updated_at`."""
    return " | ".join(
        [
            str(state.get("alias") or state.get("run_id") or "-"),
            str(state.get("status") or "-"),
            f"{state.get('iteration', 0)}/{state.get('max_iterations', '?')}",
            str(state.get("phase") or "-"),
            str(state.get("current_step") or "-"),
            score(state.get("last_score")),
            timestamp(state.get("updated_at")),
        ]
    )


def status_notes(state: Json) -> list[str]:
    """What a person needs next: why it stopped, or what it waits for and the command."""
    run_id = state.get("run_id", "RUN")
    status = state.get("status")
    stop = state.get("stop") or {}
    reason = state.get("stop_reason") or stop.get("reason")
    notes: list[str] = []
    if status in TERMINAL:
        line = f"stop: {reason or 'none'}"
        if stop.get("message"):
            line += f" ({stop['message']})"
        notes.append(line)
    elif status == "blocked":
        block = state.get("block") or {}
        notes.append(
            f"blocked: {block.get('reason') or 'custodiet audit'}"
            f" (release with: loops clear-block {run_id} --note '...')"
        )
    elif status == "awaiting_approval":
        notes.append(f"awaiting approval (approve with: loops approve {run_id})")
    elif status == "paused":
        notes.append(f"paused (continue with: loops resume {run_id})")
    return notes


# --- list ---------------------------------------------------------------------------

LIST_COLUMNS = ("RUN_ID", "ALIAS", "STATUS", "ITER", "SCORE", "STARTED")


def list_table(runs: Iterable[Json]) -> str:
    rows = [
        (
            str(run.get("run_id", "")),
            str(run.get("alias") or "-"),
            str(run.get("status") or "-") + (" (blocked)" if run.get("blocked") else ""),
            "-" if run.get("iteration") is None else str(run["iteration"]),
            score(run.get("last_score")),
            timestamp(run.get("started_at")),
        )
        for run in runs
    ]
    if not rows:
        return "no runs"
    return table(LIST_COLUMNS, rows)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    return "\n".join(lines)


# --- history ------------------------------------------------------------------------


def _short(text: Any, limit: int = 80) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _ids(items: Any) -> str:
    return ", ".join(str(item) for item in items or []) or "none"


def event_detail(event: Json) -> str:
    """One phrase per event, in the terms seed 001 Step 8 uses."""
    name = event.get("event")
    p: Json = event.get("payload") or {}
    if name == "run_started":
        return _short(p.get("task", ""))
    if name == "hydration_done":
        return f"template {p.get('template')}, rules: {_ids(p.get('rules'))}"
    if name in ("critic_verdict", "audit_verdict", "qa_verdict"):
        extra = p.get("reason") or p.get("summary") or _ids_or_empty(p.get("issues"))
        return f"{p.get('verdict')}" + (f": {_short(extra, 70)}" if extra else "")
    if name == "plan_created":
        return _short(p.get("focus", ""))
    if name in ("artifact_created", "refinement_done"):
        return f"hash {str(p.get('hash', ''))[:8]}, changed: {_ids(p.get('changed'))}"
    if name == "checks_prepared":
        return f"{p.get('checks')} checks for {len(p.get('rules') or [])} rules"
    if name == "evaluation_done":
        verdict = "PASS" if p.get("passed") else "FAIL"
        return (
            f"score {score(p.get('score'))} / {score(p.get('threshold'))} {verdict},"
            f" failed: {_ids(p.get('failed'))}, warnings: {_ids(p.get('warnings'))}"
        )
    if name == "critique_done":
        issues = p.get("issues") or []
        noun = "issue" if len(issues) == 1 else "issues"
        return f"{len(issues)} {noun}: {_ids(i.get('rule_id') for i in issues)}"
    if name == "phase_switched":
        return f"{p.get('from')} → {p.get('to')}"
    if name == "iteration_advanced":
        return f"→ iteration {p.get('iteration')}"
    if name == "phase_error":
        return f"{p.get('step')} attempt {p.get('attempt')}: {_short(p.get('error', ''), 60)}"
    if name in ("stopped", "failed"):
        what = p.get("reason") or p.get("error") or ""
        message = p.get("message")
        return _short(f"{what} ({message})" if message else what)
    if name == "block_cleared":
        return _short(f"note: {p.get('note', '')}")
    if name == "reflection_done":
        return f"outcome: {p.get('outcome')}"
    if name == "pushed":
        verified = "verified" if p.get("verified") else "NOT verified"
        return f"{p.get('branch')} @ {str(p.get('commit', ''))[:8]} ({verified})"
    if name == "approved":
        edits = p.get("edits") or {}
        return "as drafted" if not edits else _short("edited: " + json.dumps(edits))
    return _short(json.dumps(p, default=str)) if p else ""


def _ids_or_empty(issues: Any) -> str:
    if not issues:
        return ""
    return ", ".join(str(i.get("rule_id", i) if isinstance(i, Mapping) else i) for i in issues)


def history_line(event: Json) -> str:
    mark = "!" if event.get("status", "ok") != "ok" else " "
    return (
        f"{event.get('seq', '?'):>4} {mark} {timestamp(event.get('ts'), time_only=True)}"
        f"  it {event.get('iteration', 0)} {event.get('phase', '')}"
        f"  {event.get('step', ''):<15} {event.get('event', ''):<18} {event_detail(event)}"
    ).rstrip()


def notice(event: Json) -> str | None:
    """Events a person following a run should see as they happen, beside the summaries."""
    name = event.get("event")
    p: Json = event.get("payload") or {}
    if name == "audit_verdict" and p.get("verdict") == "BLOCK":
        return f"! custodiet BLOCK: {p.get('reason') or 'no reason given'}"
    if name == "critic_verdict" and p.get("verdict") != "PROCEED":
        return f"! critic {p.get('verdict')}: {_ids_or_empty(p.get('issues')) or '-'}"
    if name in ("block_cleared", "approved", "paused", "resumed", "phase_error"):
        return f"· {name}: {event_detail(event)}".rstrip(": ")
    if name == "failed":
        return f"! failed: {event_detail(event)}"
    return None


# --- seed 001 Step 8: iteration summaries from events --------------------------------


class IterationTracker:
    """Rebuilds Step 8's summaries from the event stream, one per evaluated phase.

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
        self._evaluation: Json | None = None
        self._evaluated: tuple[str, list[str]] = ("", [])
        self._critique: list[tuple[str, str]] = []

    def feed(self, event: Json) -> list[IterationSummary]:
        name = event.get("event")
        p: Json = event.get("payload") or {}
        if name == "approved":
            edited = (p.get("edits") or {}).get("max_iterations")
            if isinstance(edited, int):
                self.max_iterations = edited
        elif name == "plan_created":
            self._plan_focus = str(p.get("focus") or "")
        elif name in ("artifact_created", "refinement_done"):
            self._artifact_hash = str(p.get("hash") or "")
            self._changed = [str(c) for c in p.get("changed") or []]
        elif name == "evaluation_done":
            self._evaluation = {
                **p,
                "iteration": event.get("iteration"),
                "phase": event.get("phase"),
            }
            self._evaluated = (self._artifact_hash, list(self._changed))
            self._critique = []
        elif name == "critique_done":
            self._critique = [
                (str(issue.get("rule_id", "?")), str(issue.get("fix", "")))
                for issue in p.get("issues") or []
                if isinstance(issue, Mapping)
            ]
        elif name in ("phase_switched", "iteration_advanced", "stopped", "failed"):
            return self.finish()
        return []

    def finish(self) -> list[IterationSummary]:
        evaluation, self._evaluation = self._evaluation, None
        if evaluation is None:
            return []
        artifact_hash, changed = self._evaluated
        return [
            IterationSummary(
                iteration=int(evaluation.get("iteration") or 0),
                max_iterations=self.max_iterations,
                phase=str(evaluation.get("phase") or "-"),
                score=float(evaluation.get("score") or 0.0),
                passed=bool(evaluation.get("passed")),
                plan_focus=self._plan_focus,
                artifact_hash=artifact_hash,
                changed=changed,
                failed=[str(r) for r in evaluation.get("failed") or []],
                warnings=[str(r) for r in evaluation.get("warnings") or []],
                artifact=self.artifact,
                critique=self._critique,
            )
        ]


def iteration_summaries(events: Iterable[Json], max_iterations: int, artifact: str) -> list[str]:
    tracker = IterationTracker(max_iterations, artifact)
    summaries = [summary for event in events for summary in tracker.feed(event)]
    summaries.extend(tracker.finish())
    return [render_summary(summary) for summary in summaries]


# --- seed 001 Step 7: the final summary ----------------------------------------------


def final_summary(state: Json) -> str:
    stop: Json = state.get("stop") or {}
    reason = state.get("stop_reason") or stop.get("reason") or "none"
    lines = [
        f"══ Run {state.get('run_id', '')} {state.get('status', '')} ══",
        f"Iteration: {state.get('iteration', 0)}/{state.get('max_iterations', '?')}",
        f"Phase: {state.get('phase', '-')}",
        f"Final score: {score(state.get('last_score'))}",
        f"Stop reason: {reason}",
    ]
    if stop.get("message"):
        lines.append(f"Message: {stop['message']}")
    distance: Json | None = stop.get("distance_to_success")
    if distance:
        blockers = distance.get("blocking_rule_ids") or []
        lines += [
            "distance_to_success:",
            f"  threshold (phase {distance.get('phase')}): {score(distance.get('threshold'))}"
            f" | score: {score(distance.get('score'))} | gap: {score(distance.get('gap'))}",
            f"  failed fail-rules: {distance.get('failed_blocker_count', len(blockers))}"
            f" ({_ids(blockers)})",
            f"  rules passed: {distance.get('passed_rules')}/{distance.get('total_rules')}",
        ]
    location = artifact_location(state)
    if location and state.get("artifact_commit"):
        origin = state.get("origin")
        lines.append(f"Artifact: {location}" + (f" on {origin}" if origin else ""))
    return "\n".join(lines)
