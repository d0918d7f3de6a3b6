"""What the dashboard's pages draw, worked out without a server: the score chart's points,
the rules grid, QA's commands, a model call's tokens and cost, the DAG's layers, the
artifact's markdown (docs/dashboard.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopworks.api.dashboard import dag, markdown, render, run_view
from loopworks.api.dashboard.graphs import node_status
from loopworks.api.models import RunSummary
from loopworks.llm.pricing import DEFAULT_PRICES
from loopworks.schemas.events import EVENT
from loopworks.schemas.graph import TaskState
from loopworks.schemas.rules import Phase, Rule, Severity
from loopworks.schemas.run import RunStatus, Thresholds
from loopworks.schemas.tasks import Task, TaskStatus

pytestmark = pytest.mark.unit


def evaluation(seq: int, iteration: int, phase: str, score: float, **payload: Any) -> Any:
    return EVENT.validate_python(
        {
            "seq": seq,
            "ts": "2025-01-01T00:00:00+00:00",
            "run_id": "r",
            "iteration": iteration,
            "phase": phase,
            "step": "EVALUATE",
            "event": "evaluation_done",
            "payload": {"score": score, "passed": False, "threshold": 0.8, **payload},
        }
    )


def plan(seq: int) -> Any:
    return EVENT.validate_python(
        {
            "seq": seq,
            "ts": "2025-01-01T00:00:00+00:00",
            "run_id": "r",
            "iteration": 1,
            "phase": "A",
            "step": "PLAN",
            "event": "plan_created",
            "payload": {"focus": "f"},
        }
    )


def rule(rule_id: str, severity: Severity) -> Rule:
    return Rule.model_validate(
        {"id": rule_id, "description": rule_id, "severity": severity, "check": "a sentence"}
    )


EVENTS = [
    plan(1),
    evaluation(2, 1, "A", 0.5, failed=["tests"], warnings=["style"]),
    plan(3),
    evaluation(4, 2, "A", 0.9, passed=True),
    evaluation(5, 2, "B", 0.7, failed=["tests"]),
    evaluation(6, 3, "B", 0.95, passed=True, warnings=["gone"]),
]
RULES = [rule("tests", Severity.FAIL), rule("style", Severity.WARN), rule("docs", Severity.INFO)]


def test_one_point_per_evaluation_in_order() -> None:
    points = run_view.score_points(EVENTS)
    assert [(p.n, p.iteration, p.phase, p.score) for p in points] == [
        (1, 1, Phase.A, 0.5),
        (2, 2, Phase.A, 0.9),
        (3, 2, Phase.B, 0.7),
        (4, 3, Phase.B, 0.95),
    ]
    chart = run_view.score_chart(points, Thresholds(A=0.6, B=0.9))
    assert len(chart.dots) == 4
    xs = [dot.x for dot in chart.dots]
    assert xs == sorted(xs) and chart.left < xs[0] and xs[-1] < chart.right
    # Higher scores are drawn higher (smaller y), on the same scale as the thresholds.
    by_score = {dot.point.score: dot.y for dot in chart.dots}
    assert by_score[0.95] < by_score[0.9] < by_score[0.7] < by_score[0.5]
    a, b = chart.thresholds
    assert (a.phase, a.value, b.phase, b.value) == (Phase.A, 0.6, Phase.B, 0.9)
    assert b.y == by_score[0.9] and chart.top <= b.y < a.y <= chart.bottom
    assert chart.line.count(",") == 4


def test_no_evaluation_draws_no_point() -> None:
    chart = run_view.score_chart(run_view.score_points([plan(1)]), Thresholds())
    assert chart.dots == [] and chart.line == ""


def test_the_rules_grid_shows_each_rule_at_each_evaluation() -> None:
    grid = run_view.rule_grid(run_view.score_points(EVENTS), RULES)
    rows = {row.rule_id: row.cells for row in grid.rows}
    assert rows == {
        "tests": ["fail", "pass", "fail", "pass"],
        "style": ["warn", "pass", "pass", "pass"],
        "docs": ["pass", "pass", "pass", "pass"],
        # Not among the run's rules (an approval dropped it): its failures only.
        "gone": ["absent", "absent", "absent", "warn"],
    }
    flips = {row.rule_id: row.flips for row in grid.rows}
    assert flips == {"tests": 3, "style": 1, "docs": 0, "gone": 0}


def test_qa_commands_pair_each_call_with_its_exit_code() -> None:
    records = [
        {
            "step": "qa",
            "kind": "tool_call",
            "tool": "run_command",
            "tool_use_id": "1",
            "input": {"command": "pytest -q"},
        },
        {
            "step": "qa",
            "kind": "tool_result",
            "tool": "run_command",
            "tool_use_id": "1",
            "output": "exit code 1\nFAILED test_x",
        },
        {
            "step": "qa",
            "kind": "tool_call",
            "tool": "read_file",
            "tool_use_id": "2",
            "input": {"path": "a"},
        },
        {
            "step": "produce",
            "kind": "tool_call",
            "tool": "run_command",
            "tool_use_id": "3",
            "input": {"command": "make"},
        },
        {
            "step": "qa",
            "kind": "tool_call",
            "tool": "run_command",
            "tool_use_id": "4",
            "input": {"command": "true"},
        },
        {
            "step": "qa",
            "kind": "tool_result",
            "tool": "run_command",
            "tool_use_id": "4",
            "output": "exit code 0\n",
        },
    ]
    runs = run_view.qa_commands(records)
    assert [(r.command, r.exit_code) for r in runs] == [("pytest -q", 1), ("true", 0)]


def test_model_calls_are_split_at_each_call_and_priced() -> None:
    usage = {"input_tokens": 1000, "output_tokens": 200}
    records = [
        {"step": "plan", "role": "planner", "iteration": 1, "turn": 0, "kind": "system"},
        {
            "step": "plan",
            "role": "planner",
            "iteration": 1,
            "turn": 1,
            "kind": "assistant",
            "model": "claude-sonnet-4-6",
            "usage": usage,
        },
        {"step": "produce", "role": "producer", "iteration": 1, "turn": 0, "kind": "system"},
        {
            "step": "produce",
            "role": "producer",
            "iteration": 1,
            "turn": 1,
            "kind": "assistant",
            "model": "claude-sonnet-4-6",
            "usage": usage,
        },
        {"step": "produce", "role": "producer", "iteration": 1, "turn": 1, "kind": "tool_call"},
        {
            "step": "produce",
            "role": "producer",
            "iteration": 1,
            "turn": 2,
            "kind": "assistant",
            "model": "claude-sonnet-4-6",
            "usage": usage,
        },
        # A line recorded before lines carried usage: counted as a call, no tokens.
        {
            "step": "critique",
            "role": "artifact-critic",
            "iteration": 1,
            "turn": 1,
            "kind": "assistant",
        },
    ]
    calls = run_view.model_calls(records, {})
    assert [(c.step, c.turns, c.usage.calls) for c in calls] == [
        ("plan", 1, 1),
        ("produce", 2, 2),
        ("critique", 1, 0),
    ]
    price = DEFAULT_PRICES["claude-sonnet-4-6"]
    one = (1000 * price.input + 200 * price.output) / 1_000_000
    assert calls[0].usage.cost_usd == pytest.approx(one)
    assert calls[1].usage.cost_usd == pytest.approx(2 * one)
    assert calls[1].usage.input_tokens == 2000 and calls[2].usage.total_tokens == 0


def test_diff_lines_are_marked_for_colour() -> None:
    patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same"
    kinds = [line.kind for line in run_view.diff_lines(patch)]
    assert kinds == ["meta", "meta", "meta", "hunk", "del", "add", "context"]


def test_a_diamond_is_laid_out_in_three_layers_with_four_edges() -> None:
    layout = dag.layout(
        [("T-001", []), ("T-002", ["T-001"]), ("T-003", ["T-001"]), ("T-004", ["T-002", "T-003"])]
    )
    nodes = {node.id: node for node in layout.nodes}
    assert list(nodes) == ["T-001", "T-002", "T-003", "T-004"]
    assert {(e.source, e.target) for e in layout.edges} == {
        ("T-001", "T-002"),
        ("T-001", "T-003"),
        ("T-002", "T-004"),
        ("T-003", "T-004"),
    }
    top, left, right, bottom = (nodes[t] for t in ("T-001", "T-002", "T-003", "T-004"))
    assert top.y < left.y == right.y < bottom.y
    assert left.x + left.width <= right.x or right.x + right.width <= left.x
    for node in layout.nodes:
        assert node.x >= 0 and node.x + node.width <= layout.width
        assert node.y >= 0 and node.y + node.height <= layout.height
    assert all(edge.d.startswith("M ") and " L " in edge.d for edge in layout.edges)


def test_unconnected_parts_sit_side_by_side_and_unknown_requirements_draw_nothing() -> None:
    layout = dag.layout([("T-001", []), ("T-002", ["T-009"]), ("T-003", ["T-001"])])
    assert [(e.source, e.target) for e in layout.edges] == [("T-001", "T-003")]
    nodes = {node.id: node for node in layout.nodes}
    assert nodes["T-002"].x > max(nodes["T-001"].x, nodes["T-003"].x) + dag.NODE_WIDTH - 1


def test_fifty_tasks_lay_out() -> None:
    tasks = [
        (f"T-{n:03d}", [f"T-{m:03d}" for m in (n // 2, n - 1) if m >= 1]) for n in range(1, 51)
    ]
    layout = dag.layout(tasks)
    assert len(layout.nodes) == 50
    ys = {node.id: node.y for node in layout.nodes}
    assert all(
        ys[source] < ys[target] for source, target in ((e.source, e.target) for e in layout.edges)
    )


def task_state(status: TaskStatus, runs: int = 1) -> TaskState:
    task = Task(
        id="T-001",
        title="t",
        description="d",
        acceptance_criteria=["c"],
        verification_command="true",
    )
    return TaskState(task=task, status=status, run_ids=[f"g/T-001/{n}" for n in range(1, runs + 1)])


def loop(status: RunStatus) -> RunSummary:
    return RunSummary(run_id="g/T-001/1", status=status, started_at="2025-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("task", "loop_status", "shown"),
    [
        (TaskStatus.PENDING, None, "pending"),
        (TaskStatus.IN_PROGRESS, RunStatus.RUNNING, "running"),
        (TaskStatus.IN_PROGRESS, None, "running"),
        (TaskStatus.IN_PROGRESS, RunStatus.COMPLETED, "verifying"),
        (TaskStatus.IN_PROGRESS, RunStatus.BLOCKED, "held"),
        (TaskStatus.COMPLETED, RunStatus.COMPLETED, "merged"),
        (TaskStatus.FAILED, RunStatus.STOPPED, "failed"),
        (TaskStatus.BLOCKED, None, "held"),
    ],
)
def test_a_node_shows_the_ledger_status_and_where_its_loop_is(
    task: TaskStatus, loop_status: RunStatus | None, shown: str
) -> None:
    assert node_status(task_state(task), loop(loop_status) if loop_status else None) == shown


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        "[click](javascript:alert(1))",
        '<a href="javascript:alert(1)">x</a>',
        "<iframe src=//evil></iframe>",
    ],
)
def test_markdown_renders_no_markup_of_the_texts_own(text: str) -> None:
    html = str(markdown.rendered(f"# Title\n\n{text}\n"))
    assert html.startswith("<h1>Title</h1>")
    for forbidden in ("<script", "<img", "<iframe", "<a href", 'javascript:alert(1)"'):
        assert forbidden not in html, html


def test_markdown_keeps_its_own_structure() -> None:
    html = str(
        markdown.rendered(
            "## Usage\n\n- one\n- `two`\n\n| a |\n|---|\n| 1 |\n\n[docs](https://x.test)"
        )
    )
    for kept in (
        "<h2>Usage</h2>",
        "<li>one</li>",
        "<code>two</code>",
        "<table>",
        'href="https://x.test"',
    ):
        assert kept in html, html


def test_a_trajectory_line_in_another_shape_is_left_out_of_the_pages() -> None:
    """A repository (or a command) may put its own file under .loops/trajectory/: a page
    answered 500 on a line that was not an object, or whose fields had other types."""
    ours = {
        "run_id": "r",
        "step": "qa",
        "iteration": 1,
        "turn": 1,
        "kind": "tool_call",
        "tool": "run_command",
        "input": {"command": "pytest"},
        "ts": "2025-01-01T00:00:00Z",
    }
    text = "\n".join(
        [
            '["x"]',
            json.dumps({**ours, "iteration": "one"}),
            "not json at all",
            json.dumps(ours),
        ]
    )

    [record] = run_view.trajectory_records(text)
    assert record["tool"] == "run_command" and record["iteration"] == 1
    assert "loop_type" not in record  # as written: no default filled in


@pytest.mark.parametrize("edge", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_at_the_calendars_edge_is_shown_as_given(edge: str) -> None:
    """`?before=` at the edge of the calendar made the runs page answer 500."""
    assert render._when(edge) == edge
