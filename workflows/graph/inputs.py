"""What a task graph hands on: a task as its child loop's request, and the tasks of a prep
package (docs/graphs.md#prep-packages), for a graph or as a single run's plan. Plain
functions, no Temporal: the clock is passed in."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from temporalio.common import SearchAttributePair, TypedSearchAttributes

from loopworks.schemas.graph import GraphInput, GraphRequest, GraphState, TaskState
from loopworks.schemas.integration import IntegrationInfo
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.prep import (
    package_iterations,
    package_sha256,
    prep_package_errors,
    prep_tasks,
)
from loopworks.schemas.proof import proof_commands
from loopworks.schemas.rules import Rule, Severity
from loopworks.schemas.run import Budget, RunRequest
from loopworks.schemas.tasks import (
    LEDGER_PATH,
    MAX_CRITERIA,
    TASKS_DIR,
    GraphError,
    Task,
    validated_graph,
    verification_check,
)
from loopworks.workflows.search_attributes import LOOP_GRAPH, LOOP_STARTED_BY

# What tells a graph's loop that it is one (its producer's prompt says what follows).
GRAPH_TASK_NOTE = (
    f"This task is one of a task graph's: do not change the graph's ledger `{LEDGER_PATH}` "
    f"or its task files under `{TASKS_DIR}/`; they belong to the graph's orchestrator alone."
)
# A loop's task text stays within RunRequest's bound (its criteria: MAX_CRITERIA).
TASK_TEXT_MAX = 20_000
# Each task loop's iteration limit when neither the request nor a prep package sets one.
DEFAULT_MAX_ITERATIONS = 4


def loop_request(task_state: TaskState, request: GraphRequest, graph: GraphState) -> RunRequest:
    """The task as its loop sees it: its words, its criteria as given, and its
    verification command as the loop's one rule, so the loop works until it passes. It
    starts from the integration branch, which holds its dependencies' work, and reads no
    prep package there (the graph's tasks are its plan). Its iteration limit is the
    graph's (`max_iterations`, set when a prep package's tasks are used), else the
    request's, else the default."""
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
        check=verification_check(task.verification_command),
    )
    return RunRequest(
        task=text[:TASK_TEXT_MAX],
        repo=graph.origin,
        base_branch=graph.integration_branch,
        rules=[rule],
        acceptance_criteria=task.acceptance_criteria,
        thresholds=request.thresholds,
        max_iterations=graph.max_iterations or request.max_iterations or DEFAULT_MAX_ITERATIONS,
        audit_probability=request.audit_probability,
        budget=request.budget,
        declared_files=task.context.files,
        read_prep_package=False,
        # Its proof is its verification command, as the merge queue's
        # (docs/graphs.md#running-tasks); a command no request would take leaves it with
        # its rule alone.
        verify=proof_commands([task.verification_command]),
        allow_unverified=True,
    )


def loop_input(
    task_state: TaskState,
    params: GraphInput,
    graph: GraphState,
    budget: Budget | None,
    now: datetime,
) -> LoopInput:
    """The input of a task's latest loop (its run id the last of the task's): its
    request, with `budget` (what the graph allots it, docs/graphs.md#budget), and the
    graph's webhooks for what its loops tell them (`NotifyPlan.for_task_loops`)."""
    loop = loop_request(task_state, params.request, graph).model_copy(update={"budget": budget})
    return LoopInput(
        run_id=task_state.run_ids[-1],
        alias=task_state.task.id,
        request=loop,
        created_at=now.isoformat(),
        started_by=graph.started_by or params.started_by,
        graph_id=graph.graph_id,
        notify=params.notify.for_task_loops() if params.notify else None,
    )


@dataclass
class PrepOutcome:
    tasks: list[Task] = field(default_factory=list)
    source: str = ""
    errors: list[str] = field(default_factory=list)
    # Task lines that could not be read and were skipped ("line N: why").
    skipped: list[str] = field(default_factory=list)
    # Each loop's iteration limit under the package (set when its tasks are used).
    max_iterations: int | None = None


def from_prep_package(
    package_text: str,
    tasks_text: str | None,
    repo_root: str,
    files: Collection[str] | None,
    now: datetime,
) -> PrepOutcome:
    """A ready, fresh package for this repository stands in for planning; any other is
    rejected with every failure listed (the six checks, then the graph validator), and the
    graph plans instead. A task line that cannot be read is skipped and listed in
    `skipped`; a package none of whose lines can be read is rejected."""
    try:
        package = json.loads(package_text)
    except ValueError as err:
        return PrepOutcome(errors=[f"prep-package.json is not JSON: {err}"])
    if not isinstance(package, dict):
        return PrepOutcome(errors=["prep-package.json is not a JSON object"])
    errors = prep_package_errors(package, tasks_text, repo_root, now)
    if errors or tasks_text is None:
        return PrepOutcome(errors=errors)
    read = prep_tasks(tasks_text)
    if not read.tasks:
        unread = "prep-tasks.jsonl holds no task that can be read"
        return PrepOutcome(errors=[unread, *read.skipped])
    try:
        tasks = validated_graph(read.tasks, files)
    except GraphError as err:
        return PrepOutcome(errors=err.errors, skipped=read.skipped)
    source = package.get("source")
    tool = source.get("tool") if isinstance(source, dict) else None
    digest = package_sha256(package_text, tasks_text)
    return PrepOutcome(
        tasks,
        f"prep package ({tool or 'unknown tool'}, sha256 {digest})",
        skipped=read.skipped,
        max_iterations=package_iterations(package),
    )


def prep_for_graph(
    request: GraphRequest, state: GraphState, info: IntegrationInfo, now: datetime
) -> list[Task]:
    """The tasks of the prep package sent with the request, else of the repository's, or
    none. The state records where they came from, why a package was rejected, the lines
    skipped and, when the package's tasks are used, each task loop's iteration limit:
    the request's, else the package's (docs/graphs.md#prep-packages)."""
    upload = request.prep_package
    package = upload.package if upload else info.prep_package
    if package is None:
        return []
    tasks = upload.tasks if upload else info.prep_tasks
    prepared = from_prep_package(package, tasks, state.origin, info.files, now)
    state.prep_rejected, state.source = prepared.errors, prepared.source
    state.prep_skipped = prepared.skipped
    if prepared.tasks and prepared.max_iterations:
        state.max_iterations = request.max_iterations or prepared.max_iterations
    return prepared.tasks


def task_step(task: Task) -> str:
    """A package's task as one step of a run's plan."""
    step = f"{task.id} {task.title}: {task.description}"
    if task.context.files:
        step += " Files: " + ", ".join(task.context.files) + "."
    return f"{step} Done when `{task.verification_command}` exits 0."


def run_from_prep(request: RunRequest, prepared: PrepOutcome) -> tuple[RunRequest, list[str]]:
    """A run given a prep package's tasks (docs/graphs.md#a-single-run-from-a-prep-package):
    its request with the tasks listed after the task's words, each task's verification
    command a rule (its id the task's) after the request's rules, each task's criteria
    ("T-001: ...") after the request's, and the iteration limit the request's, else the
    package's; and the plan, one step per task, that replaces hydration's."""
    plan = [task_step(task) for task in prepared.tasks]
    text = f"{request.task}\n\nThe plan, from a prep package: work through these tasks in order.\n"
    text += "\n".join(f"{n}. {step}" for n, step in enumerate(plan, start=1))
    given = {rule.id for rule in request.rules}
    rules = [
        Rule(
            id=task.id,
            description=f"{task.id}'s verification command `{task.verification_command}` exits 0",
            severity=Severity.FAIL,
            check=verification_check(task.verification_command),
        )
        for task in prepared.tasks
        if task.id not in given
    ]
    criteria = [
        *request.acceptance_criteria,
        *(f"{task.id}: {c}" for task in prepared.tasks for c in task.acceptance_criteria),
    ]
    effective = request.model_copy(
        update={
            "task": text[:TASK_TEXT_MAX],
            "rules": [*request.rules, *rules],
            "acceptance_criteria": criteria[:MAX_CRITERIA],
            "max_iterations": request.max_iterations or prepared.max_iterations,
            # Used: the run carries what it made of it, not the files.
            "prep_package": None,
        }
    )
    return effective, plan


def loop_attributes(graph_id: str, started_by: str) -> TypedSearchAttributes:
    """A task loop's search attributes: its graph, and who started the graph (a graph
    started other than through the API, by the `temporal` CLI say, names nobody)."""
    pairs: list[SearchAttributePair[str]] = [SearchAttributePair(LOOP_GRAPH, graph_id)]
    if started_by:
        pairs.append(SearchAttributePair(LOOP_STARTED_BY, started_by))
    return TypedSearchAttributes(pairs)
