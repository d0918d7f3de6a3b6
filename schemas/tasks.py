"""Task graphs (docs/graphs.md): atomic tasks, their status ledger, and the one graph
validator.

A goal is split into tasks (`docs/tasks/T-XXX.json`), each run as a child loop in
dependency order; the orchestrator alone appends to the ledger
(`docs/current/task-status.jsonl`). Every source of a graph (a planner's answer, inline
tasks from the API, a prep package) goes through `validated_graph`, which reports every
problem at once so that a planner can fix them all in one retry.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Collection, Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints, field_validator

from loopworks.schemas.proof import PROOF_TIMEOUT_SECONDS
from loopworks.schemas.rules import CommandCheck

LEDGER_PATH = "docs/current/task-status.jsonl"
TASKS_DIR = "docs/tasks"
ARCHIVE_PATH = "docs/tasks/ARCHIVE.jsonl"
# More than this many completed task files in docs/tasks/ are archived
# (docs/graphs.md#the-ledger).
ARCHIVE_AFTER = 10
# The atomic rule: a task may modify at most this many existing files (docs/graphs.md#tasks).
MAX_EXISTING_FILES = 3
# A run's request holds at most these; a task's loop is a run, so a task holds no more.
MAX_CRITERIA = 50
MAX_DECLARED_FILES = 200

# `T-` and at least three digits, and the fix tasks the orchestrator adds for a failed one
# (docs/graphs.md#failures-and-fix-tasks).
TASK_ID_PATTERN = r"^T-\d{3,}(-fix-\d+)?$"
FIX_SUFFIX = re.compile(r"-fix-\d+$")

NonBlank = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class TaskStatus(StrEnum):
    """A task's statuses, spelled as the ledger spells them (docs/graphs.md#the-ledger)."""

    PENDING = "pending"
    IN_PROGRESS = "in-progress"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"


def _repo_path(path: str) -> str:
    """A path relative to the repository root, as git lists it ("./a//b" is "a/b").

    Absolute paths and paths leaving the repository are refused: the atomic rule and the
    file-overlap scheduling compare these strings with the repository's own paths.
    """
    path = path.strip()
    if not path or path.startswith("/"):
        raise ValueError(f"{path!r} is not a path relative to the repository root")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise ValueError(f"{path!r} leaves the repository")
    return normal


class TaskContext(BaseModel):
    """What a task's agent is pointed at (its `context`)."""

    files: list[str] = Field(
        default_factory=list,
        max_length=MAX_DECLARED_FILES,
        description="The files the task reads or modifies, relative to the repository root "
        "(e.g. `app/src/lib/pb.js`); new files it creates too. At most 3 of them may already "
        "exist in the repository. Tasks sharing a file never run at the same time.",
    )
    docs: list[str] = Field(
        default_factory=list,
        description="Documents the agent should read first, relative to the repository root.",
    )
    skills: list[str] = Field(
        default_factory=list, description="Names of skills the agent should use."
    )

    @field_validator("files", "docs")
    @classmethod
    def _relative(cls, paths: list[str]) -> list[str]:
        # Kept in order, each once: the list is shown to the agent as written.
        return list(dict.fromkeys(_repo_path(path) for path in paths))


class Task(BaseModel):
    """One atomic unit of work (docs/graphs.md#tasks; kept as `docs/tasks/T-XXX.json` in the
    repository worked on): a single logical
    change that a child loop makes and `verification_command` proves."""

    id: str = Field(
        pattern=TASK_ID_PATTERN,
        examples=["T-001", "T-002"],
        description="`T-` and at least three digits (`T-001`), unique in the graph. Fix tasks "
        "the orchestrator adds for a failed task append `-fix-<n>` (`T-001-fix-1`).",
    )
    title: NonBlank = Field(description="A short descriptive title.")
    description: NonBlank = Field(
        description="What the task must achieve and why, in enough detail for an agent that "
        "sees only this task."
    )
    requires: list[str] = Field(
        default_factory=list,
        description="Ids of the tasks that must be completed before this one starts.",
    )
    context: TaskContext = Field(
        default_factory=TaskContext,
        description="The files the task touches, documents to read and skills to use.",
    )
    acceptance_criteria: list[NonBlank] = Field(
        min_length=1,
        max_length=MAX_CRITERIA,
        description="Observable criteria that together mean the task is done, one per item.",
    )
    verification_command: str = Field(
        description="A non-interactive shell command, run from the repository root, that "
        "exits 0 exactly when the task is done (e.g. `pytest tests/test_pb.py -q`). It is "
        f"killed, and fails, after {int(PROOF_TIMEOUT_SECONDS)} seconds."
    )


def verification_check(command: str) -> CommandCheck:
    """A task's verification command as a check: one limit wherever it runs (its loop's
    rule and proof, the merge queue), so a command its loop passes, the merge passes too."""
    return CommandCheck(command=command, timeout_seconds=PROOF_TIMEOUT_SECONDS)


class LedgerLine(BaseModel):
    """One line of the status ledger (docs/graphs.md#the-ledger): the ledger's own fields
    (`id`, `status`, `updated_at`, `summary`, `delta`) and what loopworks records with them."""

    id: str = Field(pattern=TASK_ID_PATTERN)
    status: TaskStatus
    updated_at: str = Field(description="ISO 8601 time of the transition, UTC")
    summary: str = ""
    delta: dict[str, list[str]] | None = Field(
        default=None, description="The context delta, e.g. `files_added`"
    )
    attempt: int = Field(default=1, ge=1, description="Which run of the task this line is about")
    run_id: str | None = Field(default=None, description="The child loop's run id")
    exit_code: int | None = Field(default=None, description="The verification command's exit")
    output_sha256: str | None = Field(
        default=None, description="SHA-256 of the verification command's output"
    )

    def to_jsonl(self) -> str:
        """The line as the ledger holds it, without its newline.

        Unset (None) fields are left out, and so is `attempt` on a first attempt, so that a
        line with only the ledger's own fields is plain `json.dumps` of them (same keys, same
        order, its `", "`/`": "` separators), as other tools reading the ledger write it.
        """
        data = self.model_dump(mode="json", exclude_none=True)
        if data.get("attempt") == 1:
            del data["attempt"]
        return json.dumps(data, ensure_ascii=False)


def ledger_lines(text: str) -> list[LedgerLine]:
    """Every line of a ledger file, in order (blank lines skipped)."""
    return [LedgerLine.model_validate_json(line) for line in text.splitlines() if line.strip()]


def ledger_sha256(lines: Sequence[LedgerLine | str]) -> str:
    """The hash of a ledger file holding exactly these lines (or their `to_jsonl()` texts):
    how the ledger's writer knows the file still starts with the graph's own lines."""
    texts = (line if isinstance(line, str) else line.to_jsonl() for line in lines)
    return hashlib.sha256("".join(f"{text}\n" for text in texts).encode("utf-8")).hexdigest()


def latest_lines(lines: Sequence[LedgerLine]) -> dict[str, LedgerLine]:
    """Each task's most recent line (the last line for an id is its status)."""
    return {line.id: line for line in lines}


def orchestrator_owned(relpath: str) -> bool:
    """Whether a repository path is the graph's own record, which only its orchestrator
    writes (docs/graphs.md#the-ledger): the ledger, and everything under `docs/tasks/`
    (the task files, their archive, each task's artifact and loop records). Compared
    in any case and with `./` and doubled slashes ignored: a case-insensitive checkout
    has one file for every spelling."""
    parts = [
        part.lower() for part in relpath.replace("\\", "/").split("/") if part not in ("", ".")
    ]
    tasks_dir = TASKS_DIR.split("/")
    return parts == LEDGER_PATH.split("/") or parts[: len(tasks_dir)] == tasks_dir


def _whose(paths: Sequence[str]) -> str:
    """The paths named, and whose they are."""
    named = ", ".join(f"`{path}`" for path in paths[:10])
    more = f" and {len(paths) - 10} more" if len(paths) > 10 else ""
    return (
        f"{named}{more}: the task graph's ledger `{LEDGER_PATH}` and its task files under "
        f"`{TASKS_DIR}/` are written only by the graph's orchestrator, which records each "
        "task's status itself once its verification command passes on the integration "
        "branch."
    )


def orchestrator_refusal(paths: Sequence[str]) -> str:
    """Why a task loop may not write `paths` (orchestrator-owned), in words a model can
    act on: the tools say it, and the merge queue says it of a branch that changed them."""
    return (
        f"{_whose(paths)} Leave them as they are (restore any you changed) and put your "
        "work in the task's own files."
    )


def orchestrator_restored(paths: Sequence[str]) -> str:
    """What the worker put back after a task loop's command changed `paths` of the graph's
    record (docs/graphs.md#the-ledger-is-the-orchestrators-alone), told to the model."""
    return (
        f"undone: the command changed {_whose(paths)} They are back as they were when the "
        "task started; the rest of the command's work stands. Leave them as they are and "
        "put your work in the task's own files."
    )


def task_file(task: Task | str) -> str:
    """Where a graph keeps a task in the repository worked on: `docs/tasks/<id>.json`."""
    task_id = task.id if isinstance(task, Task) else task
    return f"{TASKS_DIR}/{task_id}.json"


def task_json(task: Task) -> str:
    """A task file's text: `Task`'s keys in their order, indented, newline-terminated."""
    return task.model_dump_json(indent=2) + "\n"


class GraphError(ValueError):
    """A task graph that cannot run; `errors` holds every problem, each naming its task."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__(self.errors)

    def __str__(self) -> str:
        return "; ".join(self.errors)


def _cycles(order: Sequence[str], edges: dict[str, list[str]]) -> list[list[str]]:
    """Each group of tasks that require each other (Tarjan's strongly connected
    components, iteratively so a long chain cannot hit Python's recursion limit): groups
    of two or more, or one task requiring itself. Members in graph order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    position = {task_id: i for i, task_id in enumerate(order)}
    counter = 0
    for root in order:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            successors = edges[node]
            if child < len(successors):
                work.append((node, child + 1))
                nxt = successors[child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in successors:
                    groups.append(sorted(group, key=position.__getitem__))
    return sorted(groups, key=lambda g: position[g[0]])


def _cycle_path(start: str, members: set[str], edges: dict[str, list[str]]) -> list[str]:
    """A shortest path start -> ... -> start inside one cycle group (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in edges[node]:
                if nxt == start:
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [*reversed(chain), start]
                if nxt in members and nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


def graph_errors(tasks: Sequence[Task], existing_files: Collection[str] | None = None) -> list[str]:
    """Every problem of a task graph, each message naming its task; [] when it can run.

    Checked: an empty graph, duplicate ids, an id named as a fix task (`T-001-fix-1`: only
    the graph adds those), a `requires` naming no task of the graph,
    cycles (the tasks on each, with one path through them), a blank verification command,
    and the atomic rule: a task whose `context.files` include more than 3 of
    `existing_files` (the repository's paths at the base commit) must be split. With
    `existing_files` None the atomic rule is skipped. `context.files` lists what a task
    reads or modifies, not which it modifies: a task has no other field to say so, so every
    existing file listed counts.
    """
    if not tasks:
        return ["the task graph is empty: a goal needs at least one task"]
    errors: list[str] = []
    ids = [task.id for task in tasks]
    known = set(ids)
    seen: set[str] = set()
    for task_id in ids:
        if task_id in seen:
            continue
        seen.add(task_id)
        if (times := ids.count(task_id)) > 1:
            errors.append(f"{task_id} is defined {times} times: task ids must be unique")
    existing = None if existing_files is None else set(existing_files)
    for task in tasks:
        if FIX_SUFFIX.search(task.id):
            # A fix counts for the task it fixes (its dependants start once it merges):
            # only the graph names one, for a task that failed.
            errors.append(
                f"{task.id} is named as a fix task, which only the graph adds for a failed "
                "task: give it an id of its own (T- and digits)"
            )
        for required in dict.fromkeys(task.requires):
            if required not in known:
                errors.append(f"{task.id} requires {required}, which is not a task of the graph")
        if not task.verification_command.strip():
            errors.append(
                f"{task.id} has no verification command: give a shell command that exits 0 "
                "exactly when the task is done"
            )
        if existing is not None:
            touched = [path for path in task.context.files if path in existing]
            if len(touched) > MAX_EXISTING_FILES:
                errors.append(
                    f"{task.id} modifies {len(touched)} existing files ({', '.join(touched)}); "
                    f"split it into tasks of at most {MAX_EXISTING_FILES}"
                )
    # Edges to tasks of the graph only (missing ones are reported above); a duplicate id
    # contributes the requirements of each of its definitions.
    edges: dict[str, list[str]] = {task_id: [] for task_id in ids}
    for task in tasks:
        edges[task.id].extend(r for r in dict.fromkeys(task.requires) if r in known)
    order = list(dict.fromkeys(ids))
    for group in _cycles(order, edges):
        if len(group) == 1:
            errors.append(f"{group[0]} requires itself (a cycle): it can never start")
            continue
        path = _cycle_path(group[0], set(group), edges)
        errors.append(
            f"{', '.join(group)} form a cycle ({' requires '.join(path)}): none of them "
            "can ever start"
        )
    return errors


def validated_graph(
    tasks: Sequence[Task], existing_files: Collection[str] | None = None
) -> list[Task]:
    """The tasks, in the order given, when `graph_errors` finds nothing; GraphError else."""
    if errors := graph_errors(tasks, existing_files):
        raise GraphError(errors)
    return list(tasks)
