"""A task graph's decisions as plain functions (docs/graphs.md).

Which tasks start next, which can no longer start, when the graph is done, what fix task
follows a failure, when completed task files are archived. Nothing here touches Temporal,
so the TaskGraphWorkflow imports it as it is and every rule is unit-tested on its own.

A requirement is met when its task completed, or when one of its fix tasks
(`<id>-fix-<n>`, docs/graphs.md#failures-and-fix-tasks) completed: a fix stands in for the task it
fixes, so the tasks after a failed one still run once the fix succeeds, and the ledger
keeps the failure as it happened.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

from loopworks.schemas.tasks import ARCHIVE_AFTER, Task, TaskStatus

# A fix task's description quotes at most this much of the failure (its end: a test
# runner's summary and the error come last).
FAILURE_MAX = 2000

_FIX = re.compile(r"^(?P<root>.+?)-fix-(?P<n>\d+)$")


def root_id(task_id: str) -> str:
    """The task a fix task fixes (`T-001-fix-2` -> `T-001`); any other id is its own."""
    match = _FIX.match(task_id)
    return match["root"] if match else task_id


def fixes_by_root(tasks: Sequence[Task]) -> dict[str, list[str]]:
    """The fix tasks of each task that has some (`{"T-001": ["T-001-fix-1"]}`), in graph
    order: what `requirement_met` takes."""
    fixes: dict[str, list[str]] = {}
    for task in tasks:
        if (root := root_id(task.id)) != task.id:
            fixes.setdefault(root, []).append(task.id)
    return fixes


def _status(status: Mapping[str, TaskStatus], task_id: str) -> TaskStatus:
    # A task the ledger has no line for yet is pending: it exists in docs/tasks/ and is
    # about to be added to the ledger.
    return status.get(task_id, TaskStatus.PENDING)


def requirement_met(
    required: str, status: Mapping[str, TaskStatus], fixes: Mapping[str, Sequence[str]]
) -> bool:
    """The required task, or one of its fix tasks, completed."""
    return any(
        status.get(task_id) == TaskStatus.COMPLETED
        for task_id in (required, *fixes.get(required, ()))
    )


def startable(
    tasks: Sequence[Task],
    status: Mapping[str, TaskStatus],
    running: Collection[str],
    max_parallel: int,
) -> list[str]:
    """The pending tasks to start now, in graph order.

    A task starts when it is pending and not running, every task it requires is met (see
    the module docstring), and none of its `context.files` is a file of a running task or
    of a task picked before it here (two loops editing one file would conflict in the
    merge queue); no more are picked than leave `max_parallel` running in total. A task
    that lists no file conflicts with none.
    """
    by_id = {task.id: task for task in tasks}
    fixes = fixes_by_root(tasks)
    busy = {path for t in running if t in by_id for path in by_id[t].context.files}
    picks: list[str] = []
    slots = max_parallel - len(running)
    for task in tasks:
        if len(picks) >= slots:
            break
        if task.id in running or _status(status, task.id) != TaskStatus.PENDING:
            continue
        if not all(requirement_met(r, status, fixes) for r in task.requires):
            continue
        files = set(task.context.files)
        if files & busy:
            continue
        picks.append(task.id)
        busy |= files
    return picks


def downstream(tasks: Sequence[Task], task_id: str) -> set[str]:
    """Every task that requires `task_id`, directly or through other tasks (not itself)."""
    dependants: dict[str, list[str]] = {}
    for task in tasks:
        for required in task.requires:
            dependants.setdefault(required, []).append(task.id)
    found: set[str] = set()
    frontier = [task_id]
    while frontier:
        for dependant in dependants.get(frontier.pop(), ()):
            if dependant not in found and dependant != task_id:
                found.add(dependant)
                frontier.append(dependant)
    return found


def stranded(tasks: Sequence[Task], status: Mapping[str, TaskStatus]) -> list[str]:
    """Pending tasks that can never start, in graph order: a task they require, directly or
    through others, failed or is blocked, with no fix that may still complete (or names no
    task). The workflow marks them `blocked`."""
    fixes = fixes_by_root(tasks)
    known = {task.id for task in tasks}
    # Tasks that have completed or may still complete: grown to a fixed point.
    alive = {
        task.id
        for task in tasks
        if _status(status, task.id) in (TaskStatus.COMPLETED, TaskStatus.IN_PROGRESS)
    }
    pending = [task for task in tasks if _status(status, task.id) == TaskStatus.PENDING]

    def may_complete(required: str) -> bool:
        return any(t in alive for t in (required, *fixes.get(required, ())) if t in known)

    grown = True
    while grown:
        grown = False
        for task in pending:
            if task.id not in alive and all(may_complete(r) for r in task.requires):
                alive.add(task.id)
                grown = True
    return [task.id for task in pending if task.id not in alive]


def graph_done(tasks: Sequence[Task], status: Mapping[str, TaskStatus]) -> bool:
    """Nothing is in progress and no pending task can still start: every task completed,
    failed, or is blocked (or pending behind a failure, see `stranded`)."""
    if any(_status(status, task.id) == TaskStatus.IN_PROGRESS for task in tasks):
        return False
    pending = [task.id for task in tasks if _status(status, task.id) == TaskStatus.PENDING]
    return set(pending) <= set(stranded(tasks, status))


def counts(status: Mapping[str, TaskStatus]) -> dict[str, int]:
    """How many tasks have each status, every status listed (0 included), in the ledger's
    order: pending, in-progress, completed, failed, blocked."""
    tally = {value.value: 0 for value in TaskStatus}
    for value in status.values():
        tally[TaskStatus(value).value] += 1
    return tally


def fix_task(failed: Task, tasks: Sequence[Task], failure: str) -> Task:
    """The fix task for a failed task (docs/graphs.md#failures-and-fix-tasks).

    Its id is `<id>-fix-<n>`, n one above the highest fix of that task so far (a fix of a
    fix is numbered from the task it fixes, `T-001-fix-1` -> `T-001-fix-2`, so ids stay
    `T-XXX-fix-n`). It requires what the failed task required, keeps its context, criteria
    and verification command, and its description is the original task's followed by the
    end of `failure` (at most FAILURE_MAX characters).
    """
    root = root_id(failed.id)
    original = next((task for task in tasks if task.id == root), failed)
    numbers = [
        int(match["n"])
        for task in tasks
        if (match := _FIX.match(task.id)) and match["root"] == root
    ]
    number = max(numbers, default=0) + 1
    failure = failure.strip() or "(no output)"
    if len(failure) > FAILURE_MAX:
        failure = "..." + failure[-(FAILURE_MAX - 3) :]
    description = (
        f"{original.description}\n\n"
        f"{failed.id} was attempted and failed: `{failed.verification_command}` did not "
        f"pass. Fix what made it fail and complete the task. The failure:\n{failure}"
    )
    return failed.model_copy(
        update={
            "id": f"{root}-fix-{number}",
            "title": f"Fix {root}: {original.title}",
            "description": description,
            "requires": list(failed.requires),
        },
        deep=True,
    )


def archive_due(in_tasks_dir: Collection[str], status: Mapping[str, TaskStatus]) -> list[str]:
    """When docs/tasks/ holds more than ARCHIVE_AFTER completed task files,
    all of them (sorted) move to ARCHIVE.jsonl; otherwise none do."""
    completed = sorted(t for t in in_tasks_dir if status.get(t) == TaskStatus.COMPLETED)
    return completed if len(completed) > ARCHIVE_AFTER else []


# Why a task whose loop was running when its graph stopped ended failed (the ledger has
# no `stopped` status).
STOPPED_WITH_THE_GRAPH = "stopped with the graph"


def stop_message(reason: str) -> str:
    """A stopped graph's message: that a person asked, and why if they said."""
    return f"a stop was requested: {reason}" if reason else "a stop was requested (no reason given)"
