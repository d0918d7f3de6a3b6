"""What a run's page shows, worked out from its state and events: plain functions, no I/O.

The score chart has one point per evaluation (`evaluation_done`), at its score, against
the thresholds of both phases; the rules grid has a column per evaluation and a row per
rule, so a rule that flaps or never passes shows at a glance (docs/dashboard.md#a-run).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loopworks.llm.pricing import cost_usd
from loopworks.schemas.events import EvaluationDone, Event
from loopworks.schemas.rules import Phase, Rule, Severity
from loopworks.schemas.run import Thresholds, TokenUsage
from loopworks.schemas.settings import ModelPrice
from loopworks.schemas.trajectory import read_records


@dataclass(frozen=True)
class ScorePoint:
    """One evaluation: its place among the run's evaluations (1-based), iteration, phase,
    score and the threshold it was held to."""

    n: int
    iteration: int
    phase: Phase
    score: float
    threshold: float
    passed: bool
    failed: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def score_points(events: Sequence[Event]) -> list[ScorePoint]:
    evaluations = [event for event in events if isinstance(event, EvaluationDone)]
    return [
        ScorePoint(
            n=n,
            iteration=event.iteration,
            phase=event.phase,
            score=event.payload.score,
            threshold=event.payload.threshold,
            passed=event.payload.passed,
            failed=tuple(event.payload.failed),
            warnings=tuple(event.payload.warnings),
        )
        for n, event in enumerate(evaluations, 1)
    ]


# The chart's drawing area, in SVG user units; the stylesheet scales it to the page.
CHART_WIDTH = 640
CHART_HEIGHT = 220
CHART_LEFT = 44
CHART_RIGHT = 16
CHART_TOP = 14
CHART_BOTTOM = 34


@dataclass(frozen=True)
class ChartDot:
    x: float
    y: float
    point: ScorePoint


@dataclass(frozen=True)
class ThresholdLine:
    phase: Phase
    value: float
    y: float


@dataclass(frozen=True)
class ScoreChart:
    """The score chart's geometry: the template draws it."""

    width: int
    height: int
    left: int
    right: float
    top: int
    bottom: float
    dots: list[ChartDot]
    thresholds: list[ThresholdLine]
    # The y of each gridline, with its label.
    grid: list[tuple[float, str]]

    @property
    def line(self) -> str:
        """The polyline through the dots, as SVG `points`."""
        return " ".join(f"{dot.x:.1f},{dot.y:.1f}" for dot in self.dots)


def _y(score: float) -> float:
    span = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM
    return CHART_TOP + (1 - max(0.0, min(1.0, score))) * span


def score_chart(points: Sequence[ScorePoint], thresholds: Thresholds) -> ScoreChart:
    right = CHART_WIDTH - CHART_RIGHT
    span = right - CHART_LEFT
    count = len(points)
    dots = [
        ChartDot(
            x=CHART_LEFT + (span * (i + 0.5) / count if count else 0),
            y=_y(point.score),
            point=point,
        )
        for i, point in enumerate(points)
    ]
    lines = [
        ThresholdLine(Phase.A, thresholds.A, _y(thresholds.A)),
        ThresholdLine(Phase.B, thresholds.B, _y(thresholds.B)),
    ]
    grid = [(_y(value), f"{value:.2f}") for value in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return ScoreChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        left=CHART_LEFT,
        right=right,
        top=CHART_TOP,
        bottom=CHART_HEIGHT - CHART_BOTTOM,
        dots=dots,
        thresholds=lines,
        grid=grid,
    )


CellState = Literal["pass", "fail", "warn", "info", "absent"]


@dataclass(frozen=True)
class GridRow:
    rule_id: str
    severity: Severity | None
    cells: list[CellState]

    @property
    def flips(self) -> int:
        """How often the rule went from passing to failing or back: flapping shows here."""
        seen = [cell for cell in self.cells if cell != "absent"]
        return sum(1 for a, b in itertools.pairwise(seen) if (a == "pass") != (b == "pass"))


@dataclass(frozen=True)
class RuleGrid:
    columns: list[ScorePoint]
    rows: list[GridRow] = field(default_factory=list)


def _failed_as(severity: Severity | None, listed: str) -> CellState:
    if severity is Severity.INFO:
        return "info"
    if severity is Severity.FAIL or (severity is None and listed == "failed"):
        return "fail"
    return "warn"


def rule_grid(points: Sequence[ScorePoint], rules: Sequence[Rule]) -> RuleGrid:
    """Rules by evaluations. An evaluation names the rules that failed (blockers, then the
    rest); every other rule the run had was evaluated and passed. A rule no longer in the
    run's rules (an approval dropped it) keeps its row, from its failures alone."""
    severity = {rule.id: rule.severity for rule in rules}
    ids = list(severity)
    for point in points:
        for rule_id in (*point.failed, *point.warnings):
            if rule_id not in severity and rule_id not in ids:
                ids.append(rule_id)
    rows = []
    for rule_id in ids:
        cells: list[CellState] = []
        for point in points:
            if rule_id in point.failed:
                cells.append(_failed_as(severity.get(rule_id), "failed"))
            elif rule_id in point.warnings:
                cells.append(_failed_as(severity.get(rule_id), "warnings"))
            elif rule_id in severity:
                cells.append("pass")
            else:
                cells.append("absent")
        rows.append(GridRow(rule_id, severity.get(rule_id), cells))
    return RuleGrid(columns=list(points), rows=rows)


@dataclass(frozen=True)
class CommandRun:
    """A command the QA verifier ran, and its exit code (None: no result recorded)."""

    command: str
    exit_code: int | None
    output: str


EXIT_CODE = re.compile(r"exit code (-?\d+)")


def trajectory_records(text: str) -> list[dict[str, Any]]:
    """A run's trajectory (JSON lines) as the pages read it: each line a record in the
    records' shape, as written. A line in another shape (the repository's file, or a
    command's, under .loops/trajectory/) is left out: the JSON route serves it as it
    is, and a page must not fail on it."""
    return [record.model_dump(mode="json", exclude_unset=True) for record in read_records(text)]


def qa_commands(records: Sequence[dict[str, Any]]) -> list[CommandRun]:
    """The QA verifier's `run_command` calls in its trajectory, each with the exit code its
    result reports: the evidence behind its verdict."""
    results = {
        record.get("tool_use_id"): str(record.get("output") or "")
        for record in records
        if record.get("step") == "qa" and record.get("kind") == "tool_result"
    }
    runs = []
    for record in records:
        if not (
            record.get("step") == "qa"
            and record.get("kind") == "tool_call"
            and record.get("tool") == "run_command"
        ):
            continue
        arguments = record.get("input")
        command = arguments.get("command") if isinstance(arguments, dict) else None
        output = results.get(record.get("tool_use_id"), "")
        found = EXIT_CODE.search(output)
        runs.append(
            CommandRun(
                command=str(command) if command is not None else json.dumps(arguments),
                exit_code=int(found.group(1)) if found else None,
                output=output,
            )
        )
    return runs


@dataclass(frozen=True)
class DiffLine:
    kind: Literal["add", "del", "hunk", "meta", "context"]
    text: str


def diff_lines(patch: str, cap: int = 4000) -> list[DiffLine]:
    """A file's patch, line by line, marked for colour (the first `cap` lines)."""
    lines: list[DiffLine] = []
    for text in patch.splitlines()[:cap]:
        if text.startswith(("+++", "---", "diff ", "index ")):
            kind: Literal["add", "del", "hunk", "meta", "context"] = "meta"
        elif text.startswith("@@"):
            kind = "hunk"
        elif text.startswith("+"):
            kind = "add"
        elif text.startswith("-"):
            kind = "del"
        else:
            kind = "context"
        lines.append(DiffLine(kind, text))
    return lines


@dataclass
class ModelCallView:
    """One model call in the trajectory: its lines, and what it used."""

    n: int
    step: str
    role: str
    iteration: int
    loop_type: str
    model: str
    started: str
    records: list[dict[str, Any]]
    usage: TokenUsage

    @property
    def turns(self) -> int:
        return max((int(record.get("turn") or 0) for record in self.records), default=0)


def _call_key(record: dict[str, Any]) -> tuple[Any, ...]:
    return (
        record.get("trajectory_id"),
        record.get("step"),
        record.get("role"),
        record.get("iteration"),
    )


def model_calls(
    records: Sequence[dict[str, Any]], prices: Mapping[str, ModelPrice]
) -> list[ModelCallView]:
    """The trajectory's lines as calls: each starts with its `system` line (or wherever
    the step, role or iteration changes). Tokens are the model's answers' (`usage`, in
    lines recorded since they carry it), priced as the run's usage is."""
    calls: list[ModelCallView] = []
    for record in records:
        current = calls[-1] if calls else None
        if (
            current is None
            or record.get("kind") == "system"
            or _call_key(record) != _call_key(current.records[0])
        ):
            current = ModelCallView(
                n=len(calls) + 1,
                step=str(record.get("step") or ""),
                role=str(record.get("role") or ""),
                iteration=int(record.get("iteration") or 0),
                loop_type=str(record.get("loop_type") or "task"),
                model="",
                started=str(record.get("ts") or ""),
                records=[],
                usage=TokenUsage(),
            )
            calls.append(current)
        current.records.append(record)
        usage = record.get("usage")
        if record.get("kind") == "assistant" and isinstance(usage, dict):
            model = str(record.get("model") or "")
            current.model = current.model or model
            used = TokenUsage.model_validate(usage)
            used.cost_usd = cost_usd(model, used, prices)
            current.usage = current.usage + used.model_copy(update={"calls": 1})
    return calls
