from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from loopworks.schemas.git_names import is_url
from loopworks.workspace.git import GitError, GitWorkspaces, file_sha256
from loopworks.workspace.refs import work_ref
from loopworks.workspace.runner import GIT_SPAWNS
from tests.integration.stack import bare_remote, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


def _ws(tmp_path: Path, name: str = "worker-a") -> GitWorkspaces:
    return GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com")


@pytest.fixture
def origin(tmp_path: Path) -> str:
    return _ws(tmp_path).ensure_default_origin(tmp_path / "data" / "origin.git")


def test_default_origin_created_once(tmp_path: Path) -> None:
    ws = _ws(tmp_path)
    path = tmp_path / "data" / "origin.git"
    assert ws.ensure_default_origin(path) == str(path)
    first = ws.resolve_base(str(path), None)
    assert ws.ensure_default_origin(path) == str(path)
    assert ws.resolve_base(str(path), None) == first
    assert first[0] == "main"
    assert git("rev-parse", "--is-bare-repository", cwd=path) == "true"
    readme = ws.read_file(str(path), first[1], "README.md")
    assert readme is not None and "loopworks" in readme
    assert ws.branch_log(str(path), "main") == ["Initial commit"]
    # No staging directories are left beside the origin.
    assert [p.name for p in path.parent.iterdir()] == ["origin.git"]


def test_default_origin_creation_race(tmp_path: Path) -> None:
    path = tmp_path / "data" / "origin.git"
    workers = [_ws(tmp_path, f"worker-{i}") for i in range(6)]
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        results = list(pool.map(lambda ws: ws.ensure_default_origin(path), workers))
    assert results == [str(path)] * len(workers)
    assert workers[0].branch_log(str(path), "main") == ["Initial commit"]
    assert [p.name for p in path.parent.iterdir()] == ["origin.git"]


def test_resolve_base_default_and_named(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    branch, sha = ws.resolve_base(origin, None)
    assert branch == "main"
    assert sha == git("rev-parse", "refs/heads/main", cwd=Path(origin))
    assert ws.resolve_base(origin, "main") == ("main", sha)

    workdir = ws.checkout("r1", origin, sha)
    (workdir / "feature.txt").write_text("f\n")
    feature_sha = ws.commit(workdir, "feature", WHEN)
    ws.push_branch(workdir, "feature/x", feature_sha)
    assert ws.resolve_base(origin, "feature/x") == ("feature/x", feature_sha)
    assert ws.resolve_base(origin, "refs/heads/feature/x") == ("feature/x", feature_sha)
    # ls-remote matches ref tails; "x" must not resolve to "feature/x".
    with pytest.raises(GitError, match="does not exist"):
        ws.resolve_base(origin, "x")


def test_resolve_base_unknown_branch_and_empty_repo(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    with pytest.raises(GitError, match="'nope' does not exist"):
        ws.resolve_base(origin, "nope")
    empty = tmp_path / "empty.git"
    git("init", "--quiet", "--bare", str(empty))
    with pytest.raises(GitError, match=r"no commits|empty"):
        ws.resolve_base(str(empty), None)
    with pytest.raises(GitError, match="does not exist"):
        ws.resolve_base(str(empty), "main")
    with pytest.raises(GitError):
        ws.resolve_base(str(tmp_path / "missing.git"), None)


def test_commit_publish_and_another_worker_checks_out(tmp_path: Path, origin: str) -> None:
    worker_a = _ws(tmp_path, "worker-a")
    worker_b = _ws(tmp_path, "worker-b")
    _, base = worker_a.resolve_base(origin, None)

    workdir = worker_a.checkout("run-1", origin, base)
    assert workdir == tmp_path / "worker-a" / "run-1"
    (workdir / "artifact.md").write_text("# Draft\n")
    sha = worker_a.commit(workdir, "produce: draft", WHEN)
    worker_a.publish(workdir, "run-1", sha)
    assert git("rev-parse", "refs/loopworks/run-1", cwd=Path(origin)) == sha

    other = worker_b.checkout("run-1", origin, sha)
    assert other == tmp_path / "worker-b" / "run-1"
    assert (other / "artifact.md").read_text() == "# Draft\n"
    assert git("rev-parse", "HEAD", cwd=other) == sha
    assert file_sha256(other, "artifact.md") == file_sha256(workdir, "artifact.md")
    assert file_sha256(other, "missing.md") is None
    author = git("log", "-1", "--format=%an <%ae> %cn <%ce>", cwd=other)
    assert author == "loopworks-test <loops@example.com> loopworks-test <loops@example.com>"

    # Worker B continues the run from A's commit; A picks B's commit up again.
    (other / "artifact.md").write_text("# Refined\n")
    sha2 = worker_b.commit(other, "refine", WHEN + timedelta(minutes=1))
    worker_b.publish(other, "run-1", sha2)
    again = worker_a.checkout("run-1", origin, sha2)
    assert (again / "artifact.md").read_text() == "# Refined\n"
    assert git("log", "--format=%s", cwd=again).splitlines() == [
        "refine",
        "produce: draft",
        "Initial commit",
    ]


def test_same_step_retried_gives_same_sha(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)

    def step(worker: GitWorkspaces, when: datetime) -> str:
        workdir = worker.checkout("run-2", origin, base)
        (workdir / "artifact.md").write_text("same content\n")
        return worker.commit(workdir, "produce", when)

    first = step(ws, WHEN)
    assert step(ws, WHEN) == first
    # Another worker, and the same instant in another zone, give the same commit too.
    plus_two = WHEN.astimezone(timezone(timedelta(hours=2)))
    assert step(_ws(tmp_path, "worker-b"), plus_two) == first
    assert step(ws, WHEN + timedelta(seconds=1)) != first


def test_commit_allows_empty(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-3", origin, base)
    sha = ws.commit(workdir, "nothing changed", WHEN)
    assert sha != base
    assert git("rev-parse", "HEAD^", cwd=workdir) == base


def test_checkout_discards_garbage(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-4", origin, base)
    (workdir / "artifact.md").write_text("v1\n")
    sha = ws.commit(workdir, "v1", WHEN)
    ws.checkout("run-4", origin, sha)  # handed to the next step, which crashes midway

    # A crashed attempt: modified, staged, untracked, ignored files and a deleted one.
    (workdir / "artifact.md").write_text("half written")
    (workdir / "README.md").unlink()
    (workdir / "junk").mkdir()
    (workdir / "junk" / "tmp.txt").write_text("x")
    (workdir / ".gitignore").write_text("*.log\n")
    (workdir / "build.log").write_text("log")
    git("add", ".gitignore", cwd=workdir)

    again = ws.checkout("run-4", origin, sha)
    assert again == workdir
    assert git("status", "--porcelain", "--ignored", cwd=workdir) == ""
    assert (workdir / "artifact.md").read_text() == "v1\n"
    assert (workdir / "README.md").exists()
    assert not (workdir / "junk").exists()
    assert not (workdir / "build.log").exists()
    assert git("rev-parse", "HEAD", cwd=workdir) == sha


def test_a_commit_of_only_some_paths_keeps_the_rest_and_is_never_taken_as_the_tree(
    tmp_path: Path, origin: str
) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-9", origin, base)
    (workdir / "README.md").write_text("rewritten\n")
    (workdir / "other.py").write_text("x = 1\n")
    (workdir / "kept.py").write_text("kept\n")
    sha = ws.commit(workdir, "only kept.py", WHEN, ["kept.py", "absent.py"])
    changed = git("diff-tree", "--no-commit-id", "--name-only", "-r", sha, cwd=workdir)
    assert changed.split() == ["kept.py"]
    # The tree is not the commit: the next step's checkout puts it back, whole.
    again = ws.checkout("run-9", origin, sha)
    assert again == workdir
    assert git("status", "--porcelain", "--ignored", cwd=workdir) == ""
    assert (workdir / "README.md").read_text() == ws.read_file(origin, base, "README.md")
    assert not (workdir / "other.py").exists()


def test_checkout_recovers_from_broken_clone(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.workdir("run-5")

    # A directory that is not a clone at all.
    workdir.mkdir(parents=True)
    (workdir / "leftover").write_text("x")
    assert ws.checkout("run-5", origin, base) == workdir
    assert not (workdir / "leftover").exists()
    assert git("rev-parse", "HEAD", cwd=workdir) == base

    # A stale lock from a killed git makes checkout fail: the clone is replaced.
    (workdir / ".git" / "index.lock").write_text("")
    (workdir / "README.md").write_text("changed")
    ws.checkout("run-5", origin, base)
    assert not (workdir / ".git" / "index.lock").exists()
    assert git("status", "--porcelain", cwd=workdir) == ""

    # A clone whose git metadata is damaged.
    (workdir / ".git" / "HEAD").write_text("garbage\n")
    ws.checkout("run-5", origin, base)
    assert git("rev-parse", "HEAD", cwd=workdir) == base
    assert (workdir / "README.md").exists()


def test_checkout_unknown_commit(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    with pytest.raises(GitError, match="not on origin"):
        ws.checkout("run-6", origin, "0" * 40)


def test_invalid_run_id(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    for bad in [
        "../escape",
        "a/../b",
        "a//b",
        "/a",
        "a/",
        "a/b/c/d",
        ".cache",
        "a/.x",
        "x.lock",
        "a/x.lock",
        "",
    ]:
        with pytest.raises(ValueError):
            ws.workdir(bad)
    # A task graph's child loop: `<graph id>/<task id>/<attempt>`.
    assert ws.workdir("graph-1/T-001/1") == tmp_path / "worker-a" / "graph-1" / "T-001" / "1"


def test_push_branch_verifies_remote(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-7", origin, base)
    (workdir / "artifact.md").write_text("final\n")
    sha = ws.commit(workdir, "close: final artifact", WHEN)
    assert ws.push_branch(workdir, "loops/run-7", sha) == sha
    assert ws.branch_log(origin, "loops/run-7") == ["close: final artifact", "Initial commit"]
    # Force: the branch can be moved back on a re-run of close.
    assert ws.push_branch(workdir, "loops/run-7", base) == base
    with pytest.raises(GitError, match="not a valid"):
        ws.push_branch(workdir, "bad..name", sha)


def test_close_moves_the_branch_and_the_work_ref_in_one_push(tmp_path: Path) -> None:
    origin = str(bare_remote(tmp_path / "data"))  # not the service's own: pushed to
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-7b", origin, base)
    (workdir / "artifact.md").write_text("final\n")
    sha = ws.commit(workdir, "close: final artifact", WHEN)
    before = GIT_SPAWNS.snapshot()
    assert ws.push_branch(workdir, "loops/run-7b", sha, "run-7b") == sha
    assert (GIT_SPAWNS.snapshot() - before)["push"] == 1
    assert ws.commit_at_ref(origin, work_ref("run-7b")) == sha
    assert ws.commit_at_ref(origin, "refs/heads/loops/run-7b") == sha


def test_read_file(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-8", origin, base)
    (workdir / "docs").mkdir()
    (workdir / "docs" / "a.md").write_text("héllo\n")
    sha = ws.commit(workdir, "docs", WHEN)
    ws.publish(workdir, "run-8", sha)

    assert ws.read_file(origin, sha, "docs/a.md") == "héllo\n"
    assert ws.read_file(origin, sha, "./docs/a.md") == "héllo\n"
    assert ws.read_file(origin, sha, "docs/missing.md") is None
    assert ws.read_file(origin, sha, "docs") is None
    assert ws.read_file(origin, base, "docs/a.md") is None
    with pytest.raises(ValueError):
        ws.read_file(origin, sha, "../etc/passwd")
    with pytest.raises(GitError):
        ws.read_file(origin, "1" * 40, "README.md")


def test_list_files(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-13", origin, base)
    trajectory = workdir / ".loops" / "trajectory"
    trajectory.mkdir(parents=True)
    for name in ["02-produce.jsonl", "01-refine.jsonl", "01-produce.jsonl"]:
        (trajectory / name).write_text("{}\n")
    (trajectory / "deeper").mkdir()
    (trajectory / "deeper" / "x.txt").write_text("x\n")
    (workdir / ".loops" / "insights.json").write_text("{}\n")
    sha = ws.commit(workdir, "trajectory", WHEN)
    ws.publish(workdir, "run-13", sha)

    assert ws.list_files(origin, sha, ".loops/trajectory") == [
        ".loops/trajectory/01-produce.jsonl",
        ".loops/trajectory/01-refine.jsonl",
        ".loops/trajectory/02-produce.jsonl",
        ".loops/trajectory/deeper/x.txt",
    ]
    assert ws.list_files(origin, sha, "./.loops/trajectory/") == ws.list_files(
        origin, sha, ".loops/trajectory"
    )
    # A prefix of a name is not a directory.
    assert ws.list_files(origin, sha, ".loops/traj") == []
    assert ws.list_files(origin, base, ".loops/trajectory") == []
    assert ws.list_files(f"file://{origin}", sha, ".loops") == [
        ".loops/insights.json",
        *ws.list_files(origin, sha, ".loops/trajectory"),
    ]
    with pytest.raises(ValueError):
        ws.list_files(origin, sha, "../elsewhere")
    with pytest.raises(GitError):
        ws.list_files(origin, "1" * 40, ".loops")


def test_changed_paths(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-14", origin, base)
    assert ws.changed_paths(workdir) == []
    (workdir / "README.md").write_text("changed\n")
    (workdir / "new dir").mkdir()
    (workdir / "new dir" / "a b.md").write_text("new\n")
    assert ws.changed_paths(workdir) == ["README.md", "new dir/a b.md"]
    ws.commit(workdir, "changes", WHEN)
    assert ws.changed_paths(workdir) == []
    (workdir / "README.md").unlink()
    assert ws.changed_paths(workdir) == ["README.md"]


def test_read_file_through_url_cache(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    url = f"file://{origin}"
    assert is_url(url)
    _, base = ws.resolve_base(url, None)
    workdir = ws.checkout("run-9", url, base)
    (workdir / "artifact.md").write_text("v1\n")
    sha = ws.commit(workdir, "v1", WHEN)
    ws.publish(workdir, "run-9", sha)

    assert ws.read_file(url, sha, "artifact.md") == "v1\n"
    assert ws.read_file(url, sha, "nope.md") is None
    assert len(list((tmp_path / "worker-a" / ".cache").glob("*/HEAD"))) == 1
    # A commit published after the cache was filled is fetched on demand.
    (workdir / "artifact.md").write_text("v2\n")
    sha2 = ws.commit(workdir, "v2", WHEN)
    ws.publish(workdir, "run-9", sha2)
    assert ws.read_file(url, sha2, "artifact.md") == "v2\n"
    assert ws.branch_log(url, "main") == ["Initial commit"]


def test_a_url_cache_with_a_killed_fetchs_locks_reads_on(tmp_path: Path, origin: str) -> None:
    """A git killed while it held ref locks in the cache (a worker's crash, a timeout's
    kill) left them there, and every later fetch failed on them, after restarts too."""
    ws = _ws(tmp_path)
    url = f"file://{origin}"
    _, base = ws.resolve_base(url, None)
    workdir = ws.checkout("run-9", url, base)
    (workdir / "artifact.md").write_text("v1\n")
    first = ws.commit(workdir, "v1", WHEN)
    ws.publish(workdir, "run-9", first)
    reader = _ws(tmp_path, "api")
    assert reader.commit_at_ref(url, work_ref("run-9")) == first
    [cache] = [head.parent for head in (tmp_path / "api" / ".cache").glob("*/HEAD")]
    for ref in (work_ref("run-9"), "refs/heads/main"):
        (cache / f"{ref}.lock").parent.mkdir(parents=True, exist_ok=True)
        (cache / f"{ref}.lock").write_text(f"{first}\n")
    (workdir / "artifact.md").write_text("v2\n")
    second = ws.commit(workdir, "v2", WHEN)
    ws.publish(workdir, "run-9", second)

    assert _ws(tmp_path, "api").commit_at_ref(url, work_ref("run-9")) == second
    assert not list(cache.rglob("*.lock"))


def test_non_bare_origin_by_path(tmp_path: Path) -> None:
    repo = tmp_path / "user-repo"
    git("init", "--quiet", "--initial-branch=trunk", str(repo))
    (repo / "notes.md").write_text("user notes\n")
    git("add", "notes.md", cwd=repo)
    git("commit", "--quiet", "-m", "user commit", cwd=repo)
    git("branch", "develop", cwd=repo)

    ws = _ws(tmp_path)
    branch, base = ws.resolve_base(str(repo), None)
    assert branch == "trunk"
    assert ws.resolve_base(str(repo), "develop") == ("develop", base)

    workdir = ws.checkout("run-10", str(repo), base)
    assert (workdir / "notes.md").read_text() == "user notes\n"
    (workdir / "artifact.md").write_text("made by a run\n")
    sha = ws.commit(workdir, "produce", WHEN)
    ws.publish(workdir, "run-10", sha)
    assert ws.read_file(str(repo), sha, "artifact.md") == "made by a run\n"
    assert ws.read_file(str(repo), base, "artifact.md") is None

    other = _ws(tmp_path, "worker-b").checkout("run-10", str(repo), sha)
    assert (other / "artifact.md").read_text() == "made by a run\n"
    assert ws.push_branch(workdir, "loops/run-10", sha) == sha
    assert ws.branch_log(str(repo), "loops/run-10") == ["produce", "user commit"]
    # The user's checked-out branch and files are untouched.
    assert git("symbolic-ref", "HEAD", cwd=repo) == "refs/heads/trunk"
    assert git("status", "--porcelain", cwd=repo) == ""


def test_relative_origin_path(tmp_path: Path, origin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ws = _ws(tmp_path)
    relative = str(Path(origin).relative_to(tmp_path))
    _, base = ws.resolve_base(relative, None)
    workdir = ws.checkout("run-11", relative, base)
    sha = ws.commit(workdir, "step", WHEN)
    ws.publish(workdir, "run-11", sha)
    assert ws.read_file(relative, sha, "README.md") is not None


def test_checkout_under_another_key_fetches_published_commit(tmp_path: Path, origin: str) -> None:
    # EVALUATE keys its per-group clones "<run>-eval-<group>", so the commit is not on
    # that key's work ref; it must still be found on origin.
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-12", origin, base)
    (workdir / "artifact.md").write_text("v1\n")
    sha = ws.commit(workdir, "v1", WHEN)
    ws.publish(workdir, "run-12", sha)
    (workdir / "artifact.md").write_text("v2\n")
    ws.publish(workdir, "run-12", ws.commit(workdir, "v2", WHEN))

    other = _ws(tmp_path, "worker-b")
    evaldir = other.checkout("run-12-eval-exec", origin, sha)
    assert (evaldir / "artifact.md").read_text() == "v1\n"


def test_origin_cloned_from_elsewhere_resolves_its_own_head(tmp_path: Path, origin: str) -> None:
    # A non-bare origin that is itself a clone also lists refs/remotes/origin/HEAD.
    user_clone = tmp_path / "user-clone"
    git("clone", "--quiet", origin, str(user_clone))
    git("checkout", "--quiet", "-b", "work", cwd=user_clone)
    ws = _ws(tmp_path)
    _, sha = ws.resolve_base(origin, None)
    assert ws.resolve_base(str(user_clone), None) == ("work", sha)


def test_rejects_option_like_origin_and_non_sha_commit(tmp_path: Path, origin: str) -> None:
    ws = _ws(tmp_path)
    marker = tmp_path / "pwned"
    with pytest.raises(GitError):
        ws.resolve_base(f"--upload-pack=touch {marker}:x", None)
    with pytest.raises(GitError):
        ws.read_file(f"--upload-pack=touch {marker}:x", "a" * 40, "README.md")
    assert not marker.exists()
    for bad in ["HEAD", "--help", "main~1"]:
        with pytest.raises(ValueError):
            ws.checkout("run-13", origin, bad)
        with pytest.raises(ValueError):
            ws.read_file(origin, bad, "README.md")


def test_hooks_in_a_workspace_never_run(tmp_path: Path) -> None:
    workspaces = GitWorkspaces(tmp_path / "ws", "t", "t@example.com")
    origin = workspaces.ensure_default_origin(tmp_path / "origin.git")
    _, base = workspaces.resolve_base(origin, None)
    workdir = workspaces.checkout("hooked", origin, base)
    marker = tmp_path / "hook-ran"
    hook = workdir / ".git" / "hooks" / "post-commit"
    hook.parent.mkdir(exist_ok=True)  # clones are made without git's template
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    (workdir / "file.txt").write_text("x")
    workspaces.commit(workdir, "with a hook present", datetime(2026, 1, 1, tzinfo=UTC))
    assert not marker.exists()


def test_the_workers_git_never_runs_a_workspaces_fsmonitor_or_hooks(
    tmp_path: Path, origin: str
) -> None:
    """What an agent could leave in .git (with the sandbox off) never runs as the worker."""
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(origin, None)
    workdir = ws.checkout("run-fsmonitor", origin, base)
    owned = tmp_path / "owned"
    hook = workdir / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)  # clones are made without git's template
    hook.write_text(f"#!/bin/sh\ntouch {owned}-hook\n")
    hook.chmod(0o755)
    with (workdir / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = touch {owned}-fsmonitor\n")
    (workdir / "work.txt").write_text("work\n")
    ws.commit(workdir, "work", datetime(2026, 1, 1, tzinfo=UTC))
    ws.changed_paths(workdir)
    assert not list(tmp_path.glob("owned*"))
