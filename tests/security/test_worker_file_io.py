"""The worker's own readers and writers of a workspace, each given a workspace whose paths
are symlinks out of it: none reads or writes outside. They opened paths directly before
they went through workspace/files.py; these tests hold whatever module they use.
"""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from loopworks.activities.skills import _read_files
from loopworks.agent.tools import list_files, read_file, search, write_file
from loopworks.schemas.insights import FrameworkReflection, SessionInsights
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.run import RunRequest
from loopworks.schemas.steps import HISTORY_PATH, RUN_STATE_PATH, RunLog
from loopworks.schemas.tasks import LEDGER_PATH, LedgerLine, TaskStatus
from loopworks.workspace import files
from loopworks.workspace.git import file_sha256
from loopworks.workspace.integration import append_lines, write_task_file
from loopworks.workspace.run_log import write_reflection, write_run_log

pytestmark = pytest.mark.unit

SECRET = "TOP-SECRET-7f3a9c"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a secret."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(f"{SECRET}\n")
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    return root


def unchanged(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


def _log() -> RunLog:
    state = (
        LoopInput(run_id="r-1", alias="r", request=RunRequest(task="t"), created_at="")
        .first_memory()
        .state
    )
    return RunLog(state=state, events=[])


def test_the_run_log_is_never_written_through_a_link(ws: Path, outside: Path) -> None:
    # A clone with nothing committed: the log is the worker's to write, the links refuse it.
    pygit2.init_repository(str(ws))
    (ws / ".loops").mkdir()
    (ws / RUN_STATE_PATH).symlink_to(outside / "secret.txt")
    with pytest.raises(files.Refused):
        write_run_log(ws, _log())
    (ws / RUN_STATE_PATH).unlink()
    (ws / HISTORY_PATH).unlink(missing_ok=True)
    (ws / HISTORY_PATH).symlink_to(outside / "secret.txt")
    with pytest.raises(files.Refused):
        write_run_log(ws, _log())
    unchanged(outside)


def test_the_reflection_is_never_written_into_a_linked_directory(ws: Path, outside: Path) -> None:
    (ws / ".loops").symlink_to(outside, target_is_directory=True)
    reflection = FrameworkReflection(
        request="r", guidance_received="g", followed="f", outcome="Success"
    )
    insights = SessionInsights(
        session_id="r-1",
        date="2026-01-01",
        project="p",
        summary="s",
        outcome="success",
        stop_reason="done",
    )
    with pytest.raises(Exception):  # noqa: B017 - any refusal; what is outside is checked
        write_reflection(ws, reflection, insights)
    unchanged(outside)


def test_the_ledger_and_task_files_are_never_written_through_a_link(
    ws: Path, outside: Path
) -> None:
    (ws / "docs" / "current").mkdir()
    (ws / LEDGER_PATH).symlink_to(outside / "secret.txt")
    line = LedgerLine(id="T-001", status=TaskStatus.PENDING, updated_at="2026-01-01T00:00:00Z")
    with pytest.raises(Exception):  # noqa: B017 - any refusal; what is outside is checked
        append_lines(ws, [line])
    (ws / "docs" / "tasks").symlink_to(outside, target_is_directory=True)
    with pytest.raises(Exception):  # noqa: B017 - any refusal; what is outside is checked
        write_task_file(ws, "docs/tasks/T-001.json", "{}")
    unchanged(outside)


def test_the_skill_files_read_for_the_reflector_stay_inside(ws: Path, outside: Path) -> None:
    (ws / "helpers").symlink_to(outside, target_is_directory=True)
    (ws / "notes.md").symlink_to(outside / "secret.txt")
    (ws / "mine.py").write_text("print(1)\n")
    paths = ["helpers/secret.txt", "notes.md", "mine.py", "../outside/secret.txt"]
    assert _read_files(ws, paths) == {"mine.py": "print(1)\n"}


def test_the_artifact_hash_never_reads_outside(ws: Path) -> None:
    (ws / "artifact.md").symlink_to("/proc/self/environ")
    with pytest.raises(Exception):  # noqa: B017 - any refusal; what is outside is checked
        file_sha256(ws, "artifact.md")


def test_the_agents_file_tools_never_leave_the_workspace(ws: Path, outside: Path) -> None:
    (ws / "link").symlink_to(outside, target_is_directory=True)
    (ws / "secret.md").symlink_to(outside / "secret.txt")
    for result in (
        read_file(ws, "secret.md"),
        read_file(ws, "link/secret.txt"),
        write_file(ws, "link/new.txt", "x"),
        write_file(ws, "secret.md", "x"),
    ):
        assert not result.ok and "outside" in result.content, result.content
    listed = list_files(ws)
    assert listed.ok and "secret.txt" not in listed.content and "link@" in listed.content
    found = search(ws, "SECRET")
    assert found.ok and SECRET not in found.content
    unchanged(outside)
