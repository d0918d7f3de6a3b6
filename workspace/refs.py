"""What git is handed, checked first: run ids, commit shas, paths inside a repository,
origins (local path or URL), and the ref that holds a run's work.

Values arrive from workflow inputs and API requests; anything unchecked could be a git
option, a rev expression that resolves differently on each worker, or a path outside.
"""

from __future__ import annotations

import posixpath
import re

from loopworks.schemas.git_names import redact_url_credentials

WORK_REF_PREFIX = "refs/loopworks/"
# Single-shot model calls' trajectories, a ref each until the run's close commits them
# (workspace/call_records.py). Many per run, so no cache fetches them with the work refs:
# only a run's own, when read.
CALLS_REF_PREFIX = f"{WORK_REF_PREFIX}_trajectory/"
# Pinned runs, a ref each: the gc never expires them (docs/operations.md#retention).
PINS_REF_PREFIX = f"{WORK_REF_PREFIX}_pins/"

# Run ids name a directory and ref components, so keep them to a safe alphabet. A task
# graph's child loops are `<graph id>/<task id>/<attempt>`: up to three segments.
_RUN_ID_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RUN_ID_SEGMENTS = 3
_SHA = re.compile(r"^[0-9a-f]{7,64}$")
FULL_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def redact(text: str) -> str:
    # Origins may embed tokens (https://user:token@host/...); keep them out of logs and
    # errors. One rule for a URL's credentials, checks/redaction.py's too.
    return redact_url_credentials(text)


def checked_run_id(run_id: str) -> str:
    segments = run_id.split("/")
    if (
        len(segments) > RUN_ID_SEGMENTS
        or ".." in run_id
        or not all(_RUN_ID_SEGMENT.match(s) and not s.endswith(".lock") for s in segments)
    ):
        raise ValueError(f"run id {run_id!r} is not usable as a directory and ref name")
    return run_id


def work_ref(run_id: str) -> str:
    """The ref on origin holding a run's latest published commit."""
    return f"{WORK_REF_PREFIX}{checked_run_id(run_id)}"


def calls_prefix(run_id: str) -> str:
    """Where the refs of a run's (or a task graph's) single-shot calls sit on origin."""
    return f"{CALLS_REF_PREFIX}{checked_run_id(run_id)}/_/"


def pin_ref(run_id: str) -> str:
    """The ref on origin that pins a run (or a task graph): `_pins/<run id>/_`, so that a
    graph's pin and its task loops' (`<graph>/<task>/<n>`) never collide as files and
    directories do."""
    return f"{PINS_REF_PREFIX}{checked_run_id(run_id)}/_"


def checked_commit(commit: str) -> str:
    # Commits arrive from workflow inputs; anything but a sha could be an option or a rev
    # expression that resolves differently on each worker.
    if not _SHA.match(commit):
        raise ValueError(f"{commit!r} is not a commit sha")
    return commit


def safe_relpath(path: str) -> str:
    normal = posixpath.normpath(path.replace("\\", "/"))
    if posixpath.isabs(normal) or normal == ".." or normal.startswith("../") or normal == ".":
        raise ValueError(f"path {path!r} is not inside the repository")
    return normal
