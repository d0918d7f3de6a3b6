"""A task graph's loop may not write the graph's own record (docs/graphs.md#the-ledger): the
path rule (`orchestrator_owned`) and the file tools refusing such writes with a reason the
model can act on, in a graph's loop only. What a command changed of it is put back:
tests/integration/test_graph_records_restore.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopworks.agent.tools import ToolGuard, execute
from loopworks.schemas.tasks import LEDGER_PATH, TASKS_DIR, orchestrator_owned

pytestmark = pytest.mark.unit

# The ledger line of the graph's own format, as a producer might forge it.
FORGED = '{"id": "T-001", "status": "completed", "updated_at": "2026-02-07T15:00:00Z"}\n'


@pytest.mark.parametrize(
    "path",
    [
        LEDGER_PATH,
        "./docs/current/task-status.jsonl",
        "docs//current/task-status.jsonl",
        "Docs/Current/Task-Status.JSONL",  # one file on a case-insensitive checkout
        "docs/tasks",
        "docs/tasks/T-001.json",
        "docs/tasks/ARCHIVE.jsonl",
        "docs/tasks/T-001/artifact.md",
        "docs/tasks/T-001/loops/history.jsonl",
    ],
)
def test_the_ledger_and_everything_under_the_tasks_dir_are_the_orchestrators(path: str) -> None:
    assert orchestrator_owned(path)


@pytest.mark.parametrize(
    "path",
    [
        "docs/current/notes.md",
        "docs/current",
        "docs/task-status.jsonl",
        "docs/tasks.md",
        "docs/tasksets/a.json",
        "src/docs/tasks/T-001.json",
        "artifact.md",
    ],
)
def test_other_paths_are_not(path: str) -> None:
    assert not orchestrator_owned(path)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / "docs" / "current").mkdir(parents=True)
    (root / LEDGER_PATH).write_text(FORGED.replace("completed", "pending"))
    (root / TASKS_DIR).mkdir()
    (root / TASKS_DIR / "T-001.json").write_text('{"id": "T-001"}\n')
    (root / "ledger_link").symlink_to(LEDGER_PATH)
    return root


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("write_file", {"path": LEDGER_PATH, "content": FORGED}),
        ("edit_file", {"path": LEDGER_PATH, "old": "pending", "new": "completed"}),
        ("write_file", {"path": f"{TASKS_DIR}/T-001.json", "content": "{}"}),
        ("edit_file", {"path": f"{TASKS_DIR}/T-001.json", "old": "T-001", "new": "T-002"}),
        ("write_file", {"path": f"{TASKS_DIR}/T-009.json", "content": "{}"}),
        ("write_file", {"path": "docs/Current/task-status.jsonl", "content": FORGED}),
        # A link inside the workspace leads no write into the record either.
        ("write_file", {"path": "ledger_link", "content": FORGED}),
    ],
)
def test_a_graph_tasks_file_tools_refuse_the_graphs_record_saying_why(
    ws: Path, tool: str, arguments: dict[str, str]
) -> None:
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file() and ".git" not in p.parts}
    result = execute(ws, tool, arguments, graph_task=True)
    assert not result.ok
    # The model reads what it may not do, whose the files are, and what to do instead.
    assert result.content.startswith("refusing: ")
    assert LEDGER_PATH in result.content and f"{TASKS_DIR}/" in result.content
    assert "only by the graph's orchestrator" in result.content
    assert "Leave them as they are" in result.content
    after = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before


def test_a_graph_tasks_tools_still_read_the_record_and_write_elsewhere(ws: Path) -> None:
    assert execute(ws, "read_file", {"path": LEDGER_PATH}, graph_task=True).ok
    assert execute(ws, "write_file", {"path": "docs/guide.md", "content": "x"}, graph_task=True).ok
    assert (ws / "docs" / "guide.md").read_text() == "x"


def test_a_run_of_its_own_may_write_those_paths(ws: Path) -> None:
    """Outside a graph the paths are the repository's like any other."""
    assert execute(ws, "write_file", {"path": LEDGER_PATH, "content": FORGED}).ok
    assert (ws / LEDGER_PATH).read_text() == FORGED


def test_the_guard_refuses_what_the_tools_refuse(ws: Path) -> None:
    guard = ToolGuard(ws, graph_task=True)
    assert guard.path(LEDGER_PATH) == (ws / LEDGER_PATH).resolve()  # reading is fine
    with pytest.raises(Exception, match="orchestrator"):
        guard.writable(LEDGER_PATH)
