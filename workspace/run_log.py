"""The run's record in its workspace (docs/workspace.md#the-runs-record-in-git): its
`history.jsonl` and `run.json` under `.loops/`, written by the steps that commit, so the
events live in git, not in the workflow's memory; and the reflection and insights beside
them.

Appending is idempotent: only events with a higher seq than the file's last line are
added, so a retried step that starts again from the same commit writes the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from loopworks.schemas.events import EVENT, Event
from loopworks.schemas.insights import FrameworkReflection, SessionInsights
from loopworks.schemas.steps import HISTORY_PATH, RECORDS_DIR, RUN_STATE_PATH, RunLog, SavedLog
from loopworks.workspace import files
from loopworks.workspace.call_records import call_path

# A run's history past this is not read back into the worker: the step fails saying so.
RECORD_CAP_BYTES = 64 << 20


def write_run_log(workdir: Path, log: RunLog) -> SavedLog:
    """Append the events the file lacks, rewrite run.json, write the carried call records;
    what the workspace then holds of `log`.

    The records are the worker's own: a symlink at or on the way to a file is refused
    (`files.Refused`), never written through."""
    held = files.read_bytes(workdir, HISTORY_PATH, RECORD_CAP_BYTES, follow=False, missing=b"")
    last = _last_seq(held.decode("utf-8", errors="replace"))
    fresh = [event for event in log.events if event.seq > last]
    if fresh:
        added = "".join(event.model_dump_json() + "\n" for event in fresh)
        files.write_bytes(workdir, HISTORY_PATH, held + added.encode("utf-8"))
        last = fresh[-1].seq
    files.write_text(workdir, RUN_STATE_PATH, log.state.model_dump_json(indent=2) + "\n")
    for name, text in log.calls.items():
        files.write_text(workdir, call_path(name), text)
    return SavedLog(saved_seq=last, saved_calls=sorted(log.calls))


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
    return _last_seq(held.decode("utf-8", errors="replace"))


def _last_seq(text: str) -> int:
    for line in reversed(text.splitlines()):
        if line.strip():
            return int(json.loads(line)["seq"])
    return 0


def parse_history(text: str) -> list[Event]:
    """history.jsonl's lines as events, in order."""
    return [EVENT.validate_json(line) for line in text.splitlines() if line.strip()]
