"""The merge queue's activities on real repositories: a bare origin on disk, task branches
pushed as child loops push theirs, the activity methods called as plain coroutines."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from loopworks.activities.integration import IntegrationActivities
from loopworks.llm.offline.model import OfflineModels
from loopworks.schemas.integration import (
    IntegrationRequest,
    LedgerRequest,
    MergeOutcome,
    MergeRequest,
)
from loopworks.schemas.settings import Settings
from loopworks.schemas.tasks import (
    ARCHIVE_AFTER,
    ARCHIVE_PATH,
    LEDGER_PATH,
    LedgerLine,
    Task,
    TaskContext,
    TaskStatus,
    task_file,
)
from loopworks.worker.build import build_deps
from loopworks.workspace.integration import BranchMovedError, IntegrationWorkspaces
from tests.integration.stack import git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
GRAPH = "graph-1"
BRANCH = f"graphs/{GRAPH}"
A_TXT = "one\ntwo\nthree\n"


@dataclass
class Repo:
    """A bare origin with `main` holding src/a.txt, and the activities of one worker."""

    tmp: Path
    origin: str
    acts: IntegrationActivities

    def head(self, ref: str = f"refs/heads/{BRANCH}") -> str:
        return git("--git-dir", self.origin, "rev-parse", ref)

    def show(self, commit: str, path: str) -> str:
        return git("--git-dir", self.origin, "show", f"{commit}:{path}")

    def files(self, commit: str) -> list[str]:
        out = git("--git-dir", self.origin, "ls-tree", "-r", "--name-only", commit)
        return out.splitlines()

    def count(self, commit: str) -> int:
        return int(git("--git-dir", self.origin, "rev-list", "--count", commit))

    def child(self, run_id: str, base: str, files: dict[str, str], artifact: str) -> str:
        """What a child loop leaves: its edits, artifact.md and .loops/ at the root, pushed
        to `loops/<run id>`; the branch's name."""
        work = self.tmp / "children" / run_id.replace("/", "-")
        git("clone", "--quiet", self.origin, str(work))
        git("checkout", "--quiet", "--detach", base, cwd=work)
        for path, text in {**files, "artifact.md": artifact}.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        records = work / ".loops" / "history.jsonl"
        records.parent.mkdir(parents=True, exist_ok=True)
        records.write_text(json.dumps({"run_id": run_id}) + "\n")
        git("add", "-A", cwd=work)
        git("commit", "--quiet", "-m", f"loop {run_id}", cwd=work)
        branch = f"loops/{run_id}"
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=work)
        return branch

    async def prepare(self) -> str:
        info = await self.acts.prepare_integration(
            IntegrationRequest(graph_id=GRAPH, repo=self.origin, base_branch=None)
        )
        return info.commit

    async def merge(self, task: Task, branch: str, attempt: int = 1) -> MergeOutcome:
        return await self.acts.merge_task(
            MergeRequest(
                graph_id=GRAPH,
                origin=self.origin,
                integration_branch=BRANCH,
                task=task,
                task_branch=branch,
                attempt=attempt,
                committed_at=WHEN,
            )
        )


def task(task_id: str, command: str = "true", files: list[str] | None = None) -> Task:
    return Task(
        id=task_id,
        title=f"Task {task_id}",
        description="A change.",
        context=TaskContext(files=files or []),
        acceptance_criteria=["it is done"],
        verification_command=command,
    )


def _deps(tmp_path: Path) -> IntegrationActivities:
    return IntegrationActivities(
        build_deps(Settings(LOOPS_DATA_DIR=tmp_path / "data"), OfflineModels())
    )


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    origin = tmp_path / "origin.git"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(origin))
    seed = tmp_path / "seed"
    git("clone", "--quiet", str(origin), str(seed))
    (seed / "src").mkdir()
    (seed / "src" / "a.txt").write_text(A_TXT)
    (seed / "README.md").write_text("# project\n")
    git("add", "-A", cwd=seed)
    git("commit", "--quiet", "-m", "seed", cwd=seed)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=seed)
    return Repo(tmp=tmp_path, origin=str(origin), acts=_deps(tmp_path))


async def test_prepare_creates_the_branch_once(repo: Repo) -> None:
    main = repo.head("refs/heads/main")
    info = await repo.acts.prepare_integration(
        IntegrationRequest(graph_id=GRAPH, repo=repo.origin, base_branch="main")
    )
    assert (info.origin, info.branch, info.commit) == (repo.origin, BRANCH, main)
    assert info.files == ["README.md", "src/a.txt"]
    assert repo.head() == main

    # main moves on; a retried prepare (or a continued graph) keeps the branch it made.
    branch = repo.child("other/run/1", main, {"b.txt": "b\n"}, "x")
    git(
        "--git-dir", repo.origin, "update-ref", "refs/heads/main", repo.head(f"refs/heads/{branch}")
    )
    again = await repo.prepare()
    assert again == main == repo.head()


async def test_prepare_without_a_repo_uses_the_default_origin(tmp_path: Path) -> None:
    acts = _deps(tmp_path)
    info = await acts.prepare_integration(
        IntegrationRequest(graph_id=GRAPH, repo=None, base_branch=None)
    )
    default = Settings(LOOPS_DATA_DIR=tmp_path / "data").default_origin.resolve()
    assert info.origin == str(default)
    assert info.files == ["README.md"]
    assert git("--git-dir", info.origin, "rev-parse", f"refs/heads/{BRANCH}") == info.commit


async def test_tasks_on_different_files_both_land_with_their_records_apart(repo: Repo) -> None:
    base = await repo.prepare()
    one = repo.child(f"{GRAPH}/T-001/1", base, {"src/a.txt": "ONE\ntwo\nthree\n"}, "# one\n")
    two = repo.child(f"{GRAPH}/T-002/1", base, {"src/c.txt": "c\n"}, "# two\n")

    first = await repo.merge(task("T-001", "grep -q ONE src/a.txt"), one)
    assert first.merged and first.reason == "merged"
    assert first.commit == repo.head() != base
    assert first.files_modified == ["src/a.txt"] and first.files_added == []
    assert first.exit_code == 0 and first.conflicts == []

    # The second verifies the tree with both merged: its command needs T-001's change.
    second = await repo.merge(task("T-002", "grep -q ONE src/a.txt && test -f src/c.txt"), two)
    assert second.merged, second.output_tail
    assert second.commit == repo.head()
    assert second.files_added == ["src/c.txt"] and second.files_modified == []

    head = repo.head()
    assert repo.show(head, "src/a.txt") == "ONE\ntwo\nthree"
    assert repo.show(head, "src/c.txt") == "c"
    files = repo.files(head)
    assert "artifact.md" not in files
    assert not [path for path in files if path.startswith(".loops/")]
    assert repo.show(head, "docs/tasks/T-001/artifact.md") == "# one"
    assert repo.show(head, "docs/tasks/T-002/artifact.md") == "# two"
    assert json.loads(repo.show(head, "docs/tasks/T-001/loops/history.jsonl")) == {
        "run_id": f"{GRAPH}/T-001/1"
    }
    assert "T-002/1" in repo.show(head, "docs/tasks/T-002/loops/history.jsonl")
    # Real merges, one after the other, on the first-parent line; dated as asked.
    merges = git("--git-dir", repo.origin, "log", "--first-parent", "--format=%P|%s|%cI", head)
    lines = merges.splitlines()
    assert [len(line.split("|")[0].split()) for line in lines[:2]] == [2, 2]
    assert lines[0].split("|")[1] == "Merge T-002 (attempt 1): Task T-002"
    assert lines[1].split("|")[1] == "Merge T-001 (attempt 1): Task T-001"
    assert lines[0].split("|")[2] == "2024-05-01T12:00:00+00:00"


async def test_same_lines_conflict_and_leave_the_head(repo: Repo) -> None:
    base = await repo.prepare()
    one = repo.child(f"{GRAPH}/T-001/1", base, {"src/a.txt": "uno\ntwo\nthree\n"}, "1")
    two = repo.child(f"{GRAPH}/T-002/1", base, {"src/a.txt": "eins\ntwo\nthree\n"}, "2")
    assert (await repo.merge(task("T-001"), one)).merged
    head = repo.head()

    clash = await repo.merge(task("T-002"), two)
    assert not clash.merged and clash.reason == "conflict"
    assert clash.conflicts == ["src/a.txt"]
    assert "src/a.txt" in clash.output_tail
    assert clash.commit == head == repo.head()
    assert clash.exit_code is None and clash.files_added == []


async def test_failing_verification_pushes_nothing(repo: Repo) -> None:
    base = await repo.prepare()
    one = repo.child(f"{GRAPH}/T-001/1", base, {"src/new.txt": "n\n"}, "1")

    failed = await repo.merge(task("T-001", "echo boom; exit 3"), one)
    assert not failed.merged and failed.reason == "verification_failed"
    assert failed.exit_code == 3
    assert failed.output_sha256 == hashlib.sha256(b"boom\n").hexdigest()
    assert "boom" in failed.output_tail
    assert failed.commit == base == repo.head()
    assert failed.files_added == []


async def test_passing_verification_pushes_and_a_retry_merges_once(repo: Repo) -> None:
    base = await repo.prepare()
    one = repo.child(f"{GRAPH}/T-001/1", base, {"src/new.txt": "n\n"}, "1")
    the_task = task("T-001", "echo ok; test -f src/new.txt")

    merged = await repo.merge(the_task, one)
    assert merged.merged and merged.commit == repo.head()
    assert merged.files_added == ["src/new.txt"]
    assert merged.output_sha256 == hashlib.sha256(b"ok\n").hexdigest()
    commits = repo.count(merged.commit)

    # The answer was lost and the activity retried: the same answer, no second merge.
    again = await repo.merge(the_task, one)
    assert again.merged and again.reason == "merged"
    assert again.output_tail.startswith(f"already merged by {merged.commit}")
    assert again.commit == merged.commit == repo.head()
    assert repo.count(repo.head()) == commits
    assert (again.files_added, again.files_modified) == (merged.files_added, merged.files_modified)
    assert (again.exit_code, again.output_sha256) == (0, merged.output_sha256)


async def test_a_missing_task_branch_is_not_retried(repo: Repo) -> None:
    await repo.prepare()
    with pytest.raises(ApplicationError) as raised:
        await repo.merge(task("T-001"), "loops/nowhere")
    assert raised.value.non_retryable and raised.value.type == "TaskBranchMissing"


async def test_a_merge_is_the_same_commit_when_redone(tmp_path: Path, repo: Repo) -> None:
    """An attempt that made its merge but died before pushing: the retry, on another worker,
    makes the very same commit."""
    base = await repo.prepare()
    one = repo.child(f"{GRAPH}/T-001/1", base, {"src/new.txt": "n\n"}, "1")
    merged = await repo.merge(task("T-001"), one)
    git("--git-dir", repo.origin, "update-ref", f"refs/heads/{BRANCH}", base)
    other = IntegrationActivities(
        build_deps(Settings(LOOPS_DATA_DIR=tmp_path / "data-b"), OfflineModels())
    )
    redone = await other.merge_task(
        MergeRequest(
            graph_id=GRAPH,
            origin=repo.origin,
            integration_branch=BRANCH,
            task=task("T-001"),
            task_branch=one,
            attempt=1,
            committed_at=WHEN,
        )
    )
    assert redone.commit == merged.commit == repo.head()


async def test_root_records_of_the_base_stay_as_they_were(repo: Repo) -> None:
    """A base that already has artifact.md and .loops/ (an origin used by plain loops):
    tasks' own versions go under docs/tasks/<id>/, the root keeps the base's."""
    main = repo.head("refs/heads/main")
    seeded = repo.child("plain/run/1", main, {}, "# base artifact\n")
    git(
        "--git-dir", repo.origin, "update-ref", "refs/heads/main", repo.head(f"refs/heads/{seeded}")
    )
    base = await repo.prepare()
    one = repo.child(f"{GRAPH}/T-001/1", base, {"x.txt": "x\n"}, "# one\n")
    two = repo.child(f"{GRAPH}/T-002/1", base, {"y.txt": "y\n"}, "# two\n")
    assert (await repo.merge(task("T-001"), one)).merged
    second = await repo.merge(task("T-002"), two)
    assert second.merged, second.output_tail
    assert second.files_added == ["y.txt"]
    head = repo.head()
    assert repo.show(head, "artifact.md") == "# base artifact"
    assert "plain/run/1" in repo.show(head, ".loops/history.jsonl")
    assert repo.show(head, "docs/tasks/T-001/artifact.md") == "# one"
    assert repo.show(head, "docs/tasks/T-002/artifact.md") == "# two"


async def test_a_concurrent_writer_is_never_overwritten(repo: Repo) -> None:
    base = await repo.prepare()
    ws = IntegrationWorkspaces(repo.tmp / "ws", "t", "t@example.com")
    workdir = ws.checkout("cas", repo.origin, base)
    (workdir / "mine.txt").write_text("mine\n")
    mine = ws.commit(workdir, "mine", WHEN)
    one = repo.child(f"{GRAPH}/T-001/1", base, {"src/new.txt": "n\n"}, "1")
    theirs = (await repo.merge(task("T-001"), one)).commit
    with pytest.raises(BranchMovedError):
        ws.push_leased(workdir, BRANCH, mine, expected=base)
    assert repo.head() == theirs


def line(task_id: str, status: TaskStatus, minute: int = 0) -> LedgerLine:
    stamp = (WHEN + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return LedgerLine(id=task_id, status=status, updated_at=stamp, summary=f"{task_id} {status}")


async def test_ledger_appends_each_line_once_and_writes_task_files(repo: Repo) -> None:
    base = await repo.prepare()
    tasks = [task("T-001"), task("T-002")]
    request = LedgerRequest(
        origin=repo.origin,
        integration_branch=BRANCH,
        lines=[line("T-001", TaskStatus.PENDING), line("T-002", TaskStatus.PENDING)],
        tasks=tasks,
        committed_at=WHEN,
    )
    out = await repo.acts.record_ledger(request)
    assert out.appended == 2 and out.archived == []
    assert out.commit == repo.head() != base
    ledger = repo.show(out.commit, LEDGER_PATH).splitlines()
    assert ledger == [
        line("T-001", TaskStatus.PENDING).to_jsonl(),
        line("T-002", TaskStatus.PENDING).to_jsonl(),
    ]
    assert Task.model_validate_json(repo.show(out.commit, task_file("T-001"))) == tasks[0]
    # The ledger's bootstrap: it existed, empty, before its first line.
    subjects = git("--git-dir", repo.origin, "log", "--format=%s", f"{base}..{out.commit}")
    assert subjects.splitlines()[-1] == "Task ledger: bootstrap, empty"
    assert repo.show(f"{out.commit}~1", LEDGER_PATH) == ""

    retried = await repo.acts.record_ledger(request)
    assert (retried.commit, retried.appended) == (out.commit, 0)
    assert repo.head() == out.commit

    more = request.model_copy(
        update={
            "lines": [line("T-001", TaskStatus.PENDING), line("T-001", TaskStatus.IN_PROGRESS, 1)]
        }
    )
    next_out = await repo.acts.record_ledger(more)
    assert next_out.appended == 1
    assert len(repo.show(next_out.commit, LEDGER_PATH).splitlines()) == 3


async def test_ledger_archives_after_more_than_ten_completed(repo: Repo) -> None:
    await repo.prepare()
    ids = [f"T-{n:03d}" for n in range(1, ARCHIVE_AFTER + 3)]
    tasks = [task(task_id) for task_id in ids]

    def request(lines: list[LedgerLine]) -> LedgerRequest:
        return LedgerRequest(
            origin=repo.origin,
            integration_branch=BRANCH,
            lines=lines,
            tasks=tasks,
            committed_at=WHEN,
        )

    first = await repo.acts.record_ledger(request([line(i, TaskStatus.PENDING) for i in ids]))
    done = [line(i, TaskStatus.COMPLETED, 5) for i in ids[:ARCHIVE_AFTER]]
    exactly = await repo.acts.record_ledger(request(done))
    assert exactly.archived == [] and exactly.commit != first.commit

    over = await repo.acts.record_ledger(
        request([line(ids[ARCHIVE_AFTER], TaskStatus.COMPLETED, 6)])
    )
    assert over.archived == ids[: ARCHIVE_AFTER + 1]
    files = repo.files(over.commit)
    assert [task_file(i) for i in ids if task_file(i) in files] == [task_file(ids[-1])]
    archive = [json.loads(text) for text in repo.show(over.commit, ARCHIVE_PATH).splitlines()]
    assert [entry["id"] for entry in archive] == ids[: ARCHIVE_AFTER + 1]
    assert Task.model_validate(archive[0]) == tasks[0]

    # The graph records again with all its tasks: archived ones are not written back.
    again = await repo.acts.record_ledger(request([]))
    assert (again.commit, again.appended, again.archived) == (over.commit, 0, [])
