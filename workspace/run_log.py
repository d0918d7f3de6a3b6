"""The run's record in its workspace: seed 001's `history.jsonl` and `run.json` under
`.loops/`, written by the steps that commit, so the events live in git, not in the
workflow's memory; and seed 000's reflection and insights beside them.

Appending is idempotent: only events with a higher seq than the file's last line are
added, so a retried step that starts again from the same commit writes the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from loopworks.schemas.events import EVENT, Event
from loopworks.schemas.insights import FrameworkReflection, SessionInsights
from loopworks.schemas.steps import HISTORY_PATH, RECORDS_DIR, RUN_STATE_PATH, RunLog


def write_run_log(workdir: Path, log: RunLog) -> int:
    """Append the events the file lacks, rewrite run.json; return the last seq held."""
    history = workdir / HISTORY_PATH
    history.parent.mkdir(parents=True, exist_ok=True)
    last = last_seq(history)
    fresh = [event for event in log.events if event.seq > last]
    if fresh:
        with history.open("a", encoding="utf-8") as out:
            out.writelines(event.model_dump_json() + "\n" for event in fresh)
        last = fresh[-1].seq
    state = log.state.model_dump_json(indent=2) + "\n"
    (workdir / RUN_STATE_PATH).write_text(state, encoding="utf-8")
    return last


def write_reflection(
    workdir: Path, reflection: FrameworkReflection, insights: SessionInsights
) -> None:
    """Step 10's record: `reflection.md` and `insights.json`."""
    records = workdir / RECORDS_DIR
    records.mkdir(exist_ok=True)
    (records / "reflection.md").write_text(reflection.to_markdown())
    (records / "insights.json").write_text(insights_json(insights))


def insights_json(insights: SessionInsights) -> str:
    return json.dumps(insights.model_dump(mode="json"), indent=2) + "\n"


def last_seq(history: Path) -> int:
    if not history.is_file():
        return 0
    lines = history.read_text(encoding="utf-8").splitlines()
    for line in reversed(lines):
        if line.strip():
            return int(json.loads(line)["seq"])
    return 0


def parse_history(text: str) -> list[Event]:
    """history.jsonl's lines as events, in order."""
    return [EVENT.validate_json(line) for line in text.splitlines() if line.strip()]
