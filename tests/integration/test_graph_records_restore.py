"""What a task graph's command changed of the graph's record is put back as the task's base
has it, the model told (docs/graphs.md#the-ledger-is-the-orchestrators-alone): real
commands in real git workspaces. The path rule and the file tools' refusals are unit
tests (tests/unit/test_graph_records_guard.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loopworks.agent.tools import execute
from loopworks.schemas.tasks import LEDGER_PATH, TASKS_DIR, orchestrator_owned
from loopworks.workspace.graph_records import record_changes, restore_record

pytestmark = pytest.mark.integration

# The ledger line of the graph's own format, as a producer might forge it.
FORGED = '{"id": "T-001", "status": "completed", "updated_at": "2026-02-07T15:00:00Z"}\n'


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.rstrip()


PENDING = FORGED.replace("completed", "pending")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A task loop's workspace: a clone whose commit (the task's base) holds the record."""
    root = tmp_path / "repo"
    (root / "docs" / "current").mkdir(parents=True)
    (root / LEDGER_PATH).write_text(PENDING)
    (root / TASKS_DIR).mkdir()
    (root / TASKS_DIR / "T-001.json").write_text('{"id": "T-001"}\n')
    (root / "docs" / "guide.md").write_text("a guide\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    return root


def record_as_committed(root: Path) -> bool:
    """Whether `git add -A` would record nothing of the graph's record."""
    status = git(root, "status", "--porcelain", "--untracked-files=all")
    return not [line for line in status.splitlines() if orchestrator_owned(line[3:])]


@pytest.mark.parametrize(
    ("command", "named"),
    [
        (f"echo forged >> {LEDGER_PATH}", LEDGER_PATH),
        (f"printf '%s' '{FORGED.strip()}' > {LEDGER_PATH}", LEDGER_PATH),
        (f"rm {TASKS_DIR}/T-001.json", f"{TASKS_DIR}/T-001.json"),
        (f"mkdir -p {TASKS_DIR}/T-001 && echo x > {TASKS_DIR}/T-001/artifact.md", "T-001`"),
        ("mkdir -p DOCS/Tasks && echo x > DOCS/Tasks/T-002.json", "DOCS/Tasks"),
        (f"rm -rf {TASKS_DIR} && ln -s /tmp {TASKS_DIR}", f"`{TASKS_DIR}`"),
        ("rm -rf docs/current && echo x > docs/current", "`docs/current`"),
        (f"chmod +x {LEDGER_PATH}", LEDGER_PATH),
        (f"ln -sf /etc/passwd {LEDGER_PATH}", LEDGER_PATH),
        # Same size, the modification time set back: the change time still tells.
        (
            f"touch -r {LEDGER_PATH} stamp && printf X | dd of={LEDGER_PATH} bs=1 seek=2 "
            f"conv=notrunc 2>/dev/null && touch -r stamp {LEDGER_PATH} && rm stamp",
            LEDGER_PATH,
        ),
    ],
)
def test_what_a_graph_tasks_command_changed_of_the_record_is_put_back_and_the_model_told(
    repo: Path, command: str, named: str
) -> None:
    """The sandbox lets a command write the workspace: the tool puts the record back as
    the task's base has it, and the rest of the command's work stands."""
    result = execute(
        repo, "run_command", {"command": f"echo kept > notes.md && {command}"}, graph_task=True
    )
    assert result.ok, result.content
    assert result.content.startswith("exit code 0\n")
    assert "undone: the command changed" in result.content and named in result.content
    assert "back as they were when the task started" in result.content
    assert "refusing" not in result.content
    assert record_as_committed(repo)
    assert (repo / LEDGER_PATH).read_text() == PENDING
    assert (repo / "notes.md").read_text() == "kept\n"


def test_a_failing_command_that_changed_the_record_is_put_back_and_still_fails(
    repo: Path,
) -> None:
    result = execute(
        repo, "run_command", {"command": f"echo x >> {LEDGER_PATH}; exit 3"}, graph_task=True
    )
    assert not result.ok
    assert result.content.startswith("exit code 3\n") and "undone:" in result.content
    assert record_as_committed(repo)


def test_the_record_is_put_back_as_the_tasks_base_has_it_not_the_workspaces_commit(
    repo: Path,
) -> None:
    """A commit of the loop's that carries a changed ledger (made before the worker kept
    the record) does not make it the task's: the base is what counts."""
    base = git(repo, "rev-parse", "HEAD")
    (repo / LEDGER_PATH).write_text(FORGED)
    git(repo, "commit", "-qam", "a forged ledger, committed")
    result = execute(
        repo,
        "run_command",
        {"command": f"echo more >> {LEDGER_PATH}"},
        graph_task=True,
        graph_base=base,
    )
    assert result.ok and "undone:" in result.content
    assert (repo / LEDGER_PATH).read_text() == PENDING


def test_a_command_that_leaves_the_record_as_it_was_is_not_flagged(repo: Path) -> None:
    for command in (f"cat {LEDGER_PATH} > copy.txt", f"touch {LEDGER_PATH}"):
        result = execute(repo, "run_command", {"command": command}, graph_task=True)
        assert result.ok and "undone" not in result.content and "refusing" not in result.content
    # Outside a graph the paths are the repository's: nothing is put back.
    assert execute(repo, "run_command", {"command": f"echo x >> {LEDGER_PATH}"}).ok
    assert (repo / LEDGER_PATH).read_text() == f"{PENDING}x\n"


def test_a_record_that_cannot_be_put_back_fails_the_command_saying_how_to_undo_it(
    repo: Path,
) -> None:
    """The workspace lacks the base: the model is asked to undo it, as the merge refuses."""
    result = execute(
        repo,
        "run_command",
        {"command": f"echo forged >> {LEDGER_PATH}"},
        graph_task=True,
        graph_base="0" * 40,
    )
    assert not result.ok
    assert result.content.startswith("exit code 0\n")
    assert "refusing: the command changed" in result.content and LEDGER_PATH in result.content
    assert "git show HEAD:<path> > <path>" in result.content
    assert not record_as_committed(repo)


def test_before_a_commit_the_whole_record_is_made_the_bases_and_nothing_else_touched(
    repo: Path,
) -> None:
    """What the production step runs before it commits (workspace/graph_records.py): every
    path of the record that a commit would record other than the base has it, from the
    loop's own earlier commits or from the work tree, is put back; the rest of the work
    stands."""
    (repo / TASKS_DIR / "run.sh").write_text("#!/bin/sh\n")
    (repo / TASKS_DIR / "run.sh").chmod(0o755)
    (repo / TASKS_DIR / "link").symlink_to("T-001.json")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the record, with a script and a link")
    base = git(repo, "rev-parse", "HEAD")
    (repo / LEDGER_PATH).write_text(FORGED)
    (repo / TASKS_DIR / "link").unlink()
    git(repo, "commit", "-qam", "a loop's earlier commit")
    (repo / TASKS_DIR / "run.sh").chmod(0o644)
    (repo / "DOCS" / "Tasks").mkdir(parents=True)
    (repo / "DOCS" / "Tasks" / "T-002.json").write_text("{}")
    (repo / "notes.md").write_text("the work\n")
    (repo / "docs" / "guide.md").unlink()

    owned = [LEDGER_PATH, f"{TASKS_DIR}/link", f"{TASKS_DIR}/run.sh", "DOCS/Tasks/T-002.json"]
    found = record_changes(repo, base)
    assert set(found) == set(owned)
    # Paths that are not the record's are never touched, even when asked.
    undone = restore_record(repo, base, [*found, "docs/guide.md", "notes.md"])
    assert undone == sorted(owned)
    git(repo, "add", "-A")
    committed = git(repo, "diff", "--cached", "--name-only", base).splitlines()
    assert committed == ["docs/guide.md", "notes.md"]
    assert restore_record(repo, base, record_changes(repo, base)) == []
