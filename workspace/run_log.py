"""The run's record in its workspace (docs/workspace.md#the-runs-record-in-git): its
`history.jsonl` and `run.json` under `.loops/`, written by the steps that commit, so the
events live in git, not in the workflow's memory; and the reflection and insights beside
them.

The history is the worker's, never the working tree's: a step's commands may have written
anything there (the step puts `.loops/` back before it writes, workspace/graph_records.py),
so the events are appended to the history the step's start commit holds, after the seq the
workflow counts as saved there (`RunLog.saved_seq`). A retried step starts again from the
same commit with the same mark, and writes the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from loopworks.schemas.events import EVENT, Event
from loopworks.schemas.insights import FrameworkReflection, SessionInsights
from loopworks.schemas.steps import HISTORY_PATH, RECORDS_DIR, RUN_STATE_PATH, RunLog, SavedLog
from loopworks.workspace import files
from loopworks.workspace.call_records import call_path
from loopworks.workspace.objects import open_repository, tree_of
from loopworks.workspace.runner import GIT_IN_PROCESS

# A run's history past this is not read back into the worker: the step fails saying so.
RECORD_CAP_BYTES = 64 << 20


def write_run_log(workdir: Path, log: RunLog) -> SavedLog:
    """Append the events after `log.saved_seq` to the history HEAD holds, rewrite run.json,
    write the carried call records; what the workspace then holds of `log`.

    The records are the worker's own: a symlink at or on the way to a file is refused
    (`files.Refused`), never written through."""
    held = committed_history(workdir)
    # A step sent before steps carried the mark: the commit's last event, as then.
    last = _last_seq(held) if log.saved_seq is None else log.saved_seq
    fresh = [event for event in log.events if event.seq > last]
    if held and not held.endswith(b"\n"):
        held += b"\n"  # a repository's own file: the first event starts a line of its own
    added = "".join(event.model_dump_json() + "\n" for event in fresh)
    # Written whatever the work tree holds there: the file is the commit's and the run's.
    files.write_bytes(workdir, HISTORY_PATH, held + added.encode("utf-8"))
    if fresh:
        last = fresh[-1].seq
    files.write_text(workdir, RUN_STATE_PATH, log.state.model_dump_json(indent=2) + "\n")
    for name, text in log.calls.items():
        files.write_text(workdir, call_path(name), text)
    return SavedLog(saved_seq=last, saved_calls=sorted(log.calls))


def committed_history(workdir: Path) -> bytes:
    """history.jsonl as the commit the workspace is at holds it (empty: none there, or no
    regular file); `files.TooLarge` past RECORD_CAP_BYTES."""
    GIT_IN_PROCESS.add(["cat-file"])
    repo = open_repository(workdir)
    tree = tree_of(repo, "HEAD")
    if tree is None:
        return b""
    try:
        entry = tree[HISTORY_PATH]
    except (KeyError, ValueError):
        return b""
    if entry.filemode not in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE):
        return b""
    blob = repo[entry.id]
    assert isinstance(blob, pygit2.Blob)
    if blob.size > RECORD_CAP_BYTES:
        why = f"it is {blob.size} bytes, and at most {RECORD_CAP_BYTES} are read here"
        raise files.TooLarge(HISTORY_PATH, why)
    return blob.data


def write_reflection(
    workdir: Path, reflection: FrameworkReflection, insights: SessionInsights
) -> None:
    """Step 10's record: `reflection.md` and `insights.json`."""
    files.write_text(workdir, f"{RECORDS_DIR}/reflection.md", reflection.to_markdown())
    files.write_text(workdir, f"{RECORDS_DIR}/insights.json", insights_json(insights))


def insights_json(insights: SessionInsights) -> str:
    return json.dumps(insights.model_dump(mode="json"), indent=2) + "\n"


def last_seq(workdir: Path) -> int:
    """The seq of the last event the workspace's history.jsonl holds (0: none)."""
    held = files.read_bytes(workdir, HISTORY_PATH, RECORD_CAP_BYTES, follow=False, missing=b"")
    return _last_seq(held)


def _last_seq(held: bytes) -> int:
    """The seq of the last line that is an event's; a line that is none (a repository's
    own file) is passed over, never an error."""
    for line in reversed(held.decode("utf-8", errors="replace").splitlines()):
        if (event := _event(line)) is not None:
            return event.seq
    return 0


def parse_history(text: str) -> list[Event]:
    """history.jsonl's events, in order; a line that is not an event is left out (a base
    commit's history.jsonl is the repository's, and may hold anything)."""
    return [event for line in text.splitlines() if (event := _event(line)) is not None]


def _event(line: str) -> Event | None:
    if not line.strip():
        return None
    try:
        return EVENT.validate_json(line)
    except ValueError:
        return None
