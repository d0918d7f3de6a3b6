"""What a task graph hands on: a task as its child loop's request, and the tasks of a prep
package (docs/graphs.md#prep-packages). Plain functions, no Temporal: the clock is passed
in."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from loopworks.schemas.graph import GraphRequest, TaskState
from loopworks.schemas.prep import package_sha256, prep_package_errors, prep_tasks
from loopworks.schemas.rules import CommandCheck, Rule, Severity
from loopworks.schemas.run import RunRequest
from loopworks.schemas.tasks import LEDGER_PATH, TASKS_DIR, GraphError, Task, validated_graph

# What tells a graph's loop that it is one (its producer's prompt says what follows).
GRAPH_TASK_NOTE = (
    f"This task is one of a task graph's: leave the graph's ledger `{LEDGER_PATH}` and its "
    f"task files under `{TASKS_DIR}/` unchanged; the graph's orchestrator alone writes them."
)
# A loop's task text stays within RunRequest's bound.
TASK_TEXT_MAX = 20_000


def loop_request(
    task_state: TaskState, request: GraphRequest, origin: str, integration_branch: str
) -> RunRequest:
    """The task as its loop sees it: its words, its criteria as given, and its
    verification command as the loop's one rule, so the loop works until it passes. It
    starts from the integration branch, which holds its dependencies' work."""
    task = task_state.task
    text = f"{task.title}\n\n{task.description}"
    if task.context.files:
        text += "\n\nFiles: " + ", ".join(task.context.files)
    text += f"\n\nDone when `{task.verification_command}` exits 0 in the repository root."
    text += f"\n\n{GRAPH_TASK_NOTE}"
    if task_state.last_failure:
        text += f"\n\nThe previous attempt failed:\n{task_state.last_failure}"
    rule = Rule(
        id="verification",
        description=f"The task's verification command `{task.verification_command}` exits 0",
        severity=Severity.FAIL,
        check=CommandCheck(command=task.verification_command),
    )
    return RunRequest(
        task=text[:TASK_TEXT_MAX],
        repo=origin,
        base_branch=integration_branch,
        rules=[rule],
        acceptance_criteria=task.acceptance_criteria,
        thresholds=request.thresholds,
        max_iterations=request.max_iterations,
        audit_probability=request.audit_probability,
        budget=request.budget,
        declared_files=task.context.files,
    )


@dataclass
class PrepOutcome:
    tasks: list[Task] = field(default_factory=list)
    source: str = ""
    errors: list[str] = field(default_factory=list)


def from_prep_package(
    package_text: str,
    tasks_text: str | None,
    repo_root: str,
    files: Collection[str],
    now: datetime,
) -> PrepOutcome:
    """A ready, fresh package for this repository stands in for planning; any other is
    rejected with every failure listed (the six checks, then the graph validator), and the
    graph plans instead."""
    try:
        package = json.loads(package_text)
    except ValueError as err:
        return PrepOutcome(errors=[f"prep-package.json is not JSON: {err}"])
    if not isinstance(package, dict):
        return PrepOutcome(errors=["prep-package.json is not a JSON object"])
    errors = prep_package_errors(package, tasks_text, repo_root, now)
    if errors or tasks_text is None:
        return PrepOutcome(errors=errors)
    try:
        tasks = validated_graph(prep_tasks(tasks_text), files)
    except GraphError as err:
        return PrepOutcome(errors=err.errors)
    source = package.get("source")
    tool = source.get("tool") if isinstance(source, dict) else None
    digest = package_sha256(package_text, tasks_text)
    return PrepOutcome(tasks, f"prep package ({tool or 'unknown tool'}, sha256 {digest})")
