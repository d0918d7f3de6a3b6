"""A prep package: a task list prepared ahead of a loop, and its six checks
(docs/graphs.md#prep-packages).

A preparation tool writes `.workflow/.loop/prep-package.json` and, one task per line,
`.workflow/.loop/prep-tasks.jsonl`. A graph (or a single run) takes its tasks from the
package only when all six checks pass, and reports every failure; a task line it cannot
read is skipped and named, the others are kept. Everything here is pure: the caller reads
the files and passes the clock in (a workflow's `workflow.now()`), so a replay decides
alike.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from loopworks.schemas.tasks import TASK_ID_PATTERN, Task

PREP_DIR = ".workflow/.loop"
PREP_PACKAGE_PATH = f"{PREP_DIR}/prep-package.json"
PREP_TASKS_PATH = f"{PREP_DIR}/prep-tasks.jsonl"
# Check 2: the skills a package may be prepared for. The preparation tool writes
# `ccw-loop`, the name of the loop it prepares for; loopworks takes that loop's packages
# as they are, and one written for it by name.
TARGET_SKILLS = ("ccw-loop", "loopworks")
# Before packages for `ccw-loop` were taken (a replayed graph decides as it did then).
# Each loop's iteration limit when a package is used and its `auto_loop.max_iterations`
# is not set, as the preparation tool's loop does (docs/graphs.md#prep-packages).
PREP_MAX_ITERATIONS = 10
# The most a package may ask for: a run's own bound (RunRequest.max_iterations).
PREP_MAX_ITERATIONS_CAP = 20
# Check 4: an older package may be stale.
MAX_AGE = timedelta(hours=24)
# The preparation tool labels UTC+8 times with a `Z` (its `getUtc8ISOString` adds 8 hours
# and keeps toISOString's `Z`), so a fresh package may look up to 8 hours ahead of now.
# Rather than accept any future time, we accept up to MAX_AGE ahead and refuse beyond,
# where no clock skew explains it.
MAX_AHEAD = timedelta(hours=24)
# A prep task without acceptance criteria gets this one (a task needs at least one).
DEFAULT_CRITERION = "The verification command exits 0."
TITLE_MAX = 80


class PrepUpload(BaseModel):
    """A prep package's two files, as text: prep-package.json and prep-tasks.jsonl
    (docs/graphs.md#prep-packages)."""

    package: str = Field(min_length=2, max_length=200_000, description="prep-package.json")
    tasks: str = Field(max_length=2_000_000, description="prep-tasks.jsonl")


class PrepEnvironment(BaseModel):
    model_config = ConfigDict(extra="allow")

    project_root: str


class PrepSource(BaseModel):
    model_config = ConfigDict(extra="allow")

    tool: str = Field(description="The tool that prepared the package")


class PrepTaskCounts(BaseModel):
    model_config = ConfigDict(extra="allow")

    total: int = Field(ge=0)


class PrepAutoLoop(BaseModel):
    model_config = ConfigDict(extra="allow")

    enabled: bool = True
    max_iterations: int | None = Field(default=None, ge=1)


class PrepPackage(BaseModel):
    """`prep-package.json` as the checks read it; fields they do not read are kept as-is.

    `prep_package_errors` checks the raw JSON rather than this model, because a model
    stops at the first bad field and every failed check is reported.
    """

    model_config = ConfigDict(extra="allow")

    prep_status: str = Field(description="`ready` when the package may be consumed")
    target_skill: str
    generated_at: datetime
    environment: PrepEnvironment
    tasks: PrepTaskCounts
    source: PrepSource | None = None
    auto_loop: PrepAutoLoop | None = None


def _same_root(a: str, b: str) -> bool:
    # Textual: no symlink is resolved (that would be I/O).
    return posixpath.normpath(a) == posixpath.normpath(b)


def _age_error(generated_at: Any, now: datetime) -> str | None:
    if generated_at is None:
        return "generated_at is missing: the package's age cannot be checked"
    try:
        when = datetime.fromisoformat(str(generated_at))
    except ValueError:
        return f"generated_at {generated_at!r} is not an ISO 8601 date-time"
    # A time without a zone is read as UTC, as is a clock without one.
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    age = now - when
    # One decimal, so a package 24.4 hours old does not read "24h old (max 24h)".
    hours = round(abs(age) / timedelta(hours=1), 1)
    if age > MAX_AGE:
        return f"prep-package is {hours:g}h old (max 24h), may be stale"
    if -age > MAX_AHEAD:
        return f"prep-package is dated {hours:g}h in the future (generated_at {generated_at})"
    return None


def prep_package_errors(
    package: dict[str, Any],
    tasks_text: str | None,
    repo_root: str,
    now: datetime,
    target_skills: tuple[str, ...] = TARGET_SKILLS,
) -> list[str]:
    """The six checks, every failure reported, each naming what it checked; [] when
    the package may be consumed.

    `package` is the parsed prep-package.json, `tasks_text` prep-tasks.jsonl's text (None
    when the file does not exist), `repo_root` the project root the loop runs in, `now` the
    caller's clock. The checks: `prep_status` is `ready`; `target_skill` is one of
    `target_skills` (`ccw-loop` or `loopworks`); `environment.project_root` is
    `repo_root`; `generated_at` is at most 24 hours before `now`; prep-tasks.jsonl exists;
    the package's `tasks.total` is above 0.
    """
    errors: list[str] = []
    status = package.get("prep_status")
    if status != "ready":
        errors.append(f'prep_status is "{status}", expected "ready"')
    skill = package.get("target_skill")
    if skill not in target_skills:
        expected = " or ".join(f'"{name}"' for name in target_skills)
        errors.append(f'target_skill is "{skill}", expected {expected}')
    environment = package.get("environment")
    root = environment.get("project_root") if isinstance(environment, dict) else None
    if not isinstance(root, str) or not _same_root(root, repo_root):
        errors.append(f'project_root mismatch: prep="{root}", current="{repo_root}"')
    if age_error := _age_error(package.get("generated_at"), now):
        errors.append(age_error)
    if tasks_text is None:
        errors.append("prep-tasks.jsonl not found")
    counts = package.get("tasks")
    total = counts.get("total") if isinstance(counts, dict) else None
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        errors.append(f"task count is {total or 0}: tasks.total must be above 0")
    return errors


def package_iterations(package: dict[str, Any]) -> int:
    """Each loop's iteration limit under this package: `auto_loop.max_iterations`, else
    PREP_MAX_ITERATIONS (10); a value that is not a whole number is not read, one above
    PREP_MAX_ITERATIONS_CAP (20, a run's own bound) is cut to it."""
    auto_loop = package.get("auto_loop")
    value = auto_loop.get("max_iterations") if isinstance(auto_loop, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return PREP_MAX_ITERATIONS
    return min(value, PREP_MAX_ITERATIONS_CAP)


def package_sha256(package_text: str, tasks_text: str) -> str:
    """One hash for the pair of files a graph came from (hex SHA-256).

    Each file's UTF-8 bytes are preceded by their length, so no two different pairs hash
    alike (moving text from one file to the other changes the hash).
    """
    digest = hashlib.sha256()
    for text in (package_text, tasks_text):
        data = text.encode()
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


_SOURCE_ID = re.compile(r"^[A-Za-z]+-0*(\d+)$")


def _task_id(value: Any) -> str | None:
    """A prep id as a task id: `task-001`, `TASK-1` and `T-001` are `T-001`."""
    if not isinstance(value, str):
        return None
    if re.match(TASK_ID_PATTERN, value):
        return value
    match = _SOURCE_ID.match(value.strip())
    return f"T-{int(match.group(1)):03d}" if match else None


def _first(line: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if line.get(key) not in (None, "", []):
            return line[key]
    return None


def _title(description: str) -> str:
    first = description.strip().splitlines()[0] if description.strip() else ""
    head = first.split(": ", 1)[0] if ": " in first else first
    if len(head) <= TITLE_MAX:
        return head
    return head[:TITLE_MAX].rsplit(" ", 1)[0] or head[:TITLE_MAX]


def _paths(items: Any) -> list[Any]:
    # ccw's upstream tasks list files as strings or as `{"path": ...}` objects.
    if not isinstance(items, list):
        return []
    return [item.get("path") if isinstance(item, dict) else item for item in items]


def _as_task(line: dict[str, Any]) -> dict[str, Any]:
    convergence = _first(line, "convergence", "_convergence")
    convergence = convergence if isinstance(convergence, dict) else {}
    context = line.get("context")
    context = context if isinstance(context, dict) else {}
    description = line.get("description")
    criteria = _first(line, "acceptance_criteria") or convergence.get("criteria")
    requires = _first(line, "requires", "depends_on", "_depends_on") or []
    return {
        "id": _task_id(line.get("id")),
        "title": _first(line, "title")
        or (_title(description) if isinstance(description, str) else None),
        "description": description,
        "requires": [_task_id(r) or r for r in requires] if isinstance(requires, list) else [],
        "context": {
            "files": _paths(context.get("files") or _first(line, "files_changed", "files")),
            "docs": context.get("docs") or [],
            "skills": context.get("skills") or [],
        },
        "acceptance_criteria": criteria or [DEFAULT_CRITERION],
        "verification_command": _first(line, "verification_command")
        or convergence.get("verification")
        or "",
    }


class PrepTasks(BaseModel):
    """prep-tasks.jsonl read: the tasks of the lines that could be read, and why each other
    line was skipped ("line N: ...")."""

    tasks: list[Task] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)


def prep_tasks(tasks_text: str) -> PrepTasks:
    """prep-tasks.jsonl's tasks as graph tasks (`Task`), in line order; blank lines skipped.

    A line needs `id` and `description` and may carry anything else; the preparation tool
    writes its own loop's (ccw-loop's) tasks. A line in `Task`'s own shape is taken as it
    is; otherwise each `Task` field is read from the first of these that is set:

    - `id`: `id`, respelled `T-<n>` with at least 3 digits (`task-001`, `TASK-1` -> `T-001`);
    - `title`: `title`, else the description's first line up to its first `: ` (ccw writes
      "<title>: <description>"), cut at 80 characters;
    - `description`: `description`;
    - `requires`: `requires`, `depends_on`, `_depends_on`, each id respelled as `id` is;
    - `context.files`: `context.files`, `files_changed`, `files` (an item `{"path": p}` is p);
      `context.docs` and `context.skills` from `context`;
    - `acceptance_criteria`: `acceptance_criteria`, `convergence.criteria`,
      `_convergence.criteria`, else "The verification command exits 0.";
    - `verification_command`: `verification_command`, `convergence.verification`,
      `_convergence.verification`, else blank, which `graph_errors` refuses by name: no
      command is guessed.

    Other fields (`status`, `priority`, `tool`, `mode`, ...) are ignored: the ledger owns
    status. A line that cannot be read (not JSON, not an object, without `id` or
    `description`, an id that is no task id, a field out of shape) is skipped, as the
    preparation tool's own loop skips it, and named in `skipped` ("line N: ...") so the
    graph's state lists it rather than losing it silently.
    """
    read = PrepTasks()
    for number, text in enumerate(tasks_text.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            # json says "Unterminated string starting at" of a string cut short.
            why = exc.msg.removesuffix(" at")
            read.skipped.append(f"line {number}: not JSON ({why} at column {exc.colno})")
            continue
        if not isinstance(line, dict):
            read.skipped.append(f"line {number}: not a JSON object")
            continue
        missing = [key for key in ("id", "description") if not line.get(key)]
        if missing:
            read.skipped.append(
                f"line {number}: {' and '.join(missing)} missing (a task needs both)"
            )
            continue
        fields = _as_task(line)
        if fields["id"] is None:
            read.skipped.append(f"line {number}: id {line['id']!r} is not a task id like T-001")
            continue
        try:
            read.tasks.append(Task.model_validate(fields))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}"
                for error in exc.errors()
            )
            read.skipped.append(f"line {number} ({fields['id']}): {problems}")
    return read
