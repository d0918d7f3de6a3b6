"""Each way loopworks' git touches a repository it did not create, on a repository that
names a program everywhere git would run one (tests/security/hostile_origin.py): a push, a
fetch, a clone, ls-remote, reads in place, and what only some origins set up (proc-receive,
a checked-out branch updated in place, a partial clone's promisor, a clone's tree that is a
repository). No program of the repository runs; a test that fails names the path.

On a local origin git starts upload-pack or receive-pack in the origin itself, clearing
the caller's `-c` settings; which of those programs honour the origin's config depends on
git's version. So besides finding no marker, the push, fetch, clone and ls-remote tests
read git's own trace for the program git started in the origin, and require it to carry
the settings that switch the origin's programs off."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.playbook.store import PlaybookStore
from loopworks.schemas.playbook import Playbook
from loopworks.workspace.integration import IntegrationWorkspaces
from loopworks.workspace.refs import work_ref
from loopworks.workspace.runner import GitError
from tests.integration.stack import bare_remote, git
from tests.security.hostile_origin import HostileOrigin, hostile_origin, program, signed_commit

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
# What the program started in the origin must have switched off, whatever else it does.
SWITCHED_OFF = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.alternateRefsCommand=true",
    "log.showSignature=false",
    "gpg.program=gpg",
    "receive.denyCurrentBranch=refuse",
    "safe.bareRepository=explicit",
)
FORMS = ["path", "file-url"]


@pytest.fixture
def origin(tmp_path: Path) -> HostileOrigin:
    return hostile_origin(tmp_path / "hostile")


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """git's trace of every git process the worker's git starts (GIT_TRACE reaches the
    ones started in the origin too)."""
    path = tmp_path / "git-trace"
    monkeypatch.setenv("GIT_TRACE", str(path))
    return path


def _ws(tmp_path: Path) -> IntegrationWorkspaces:
    return IntegrationWorkspaces(tmp_path / "data", "loopworks-test", "loops@example.com")


def _named(origin: HostileOrigin, form: str) -> str:
    return str(origin.path) if form == "path" else origin.path.as_uri()


def _failure(call: Callable[[], object]) -> str:
    """The GitError `call` raised ("" when it raised none), for a test to look for what
    ran before it looks at why the call failed."""
    try:
        call()
    except GitError as exc:
        return str(exc)
    return ""


def assert_started_hardened(trace: Path, program: str) -> None:
    """Every `program` (upload-pack, receive-pack) git started for the worker's git ran
    with the origin's programs switched off, and at least one was started."""
    started = [
        line
        for line in trace.read_text().splitlines()
        if "trace: run_command:" in line and program in line
    ]
    assert started, f"no {program} was started"
    for line in started:
        missing = [setting for setting in SWITCHED_OFF if setting not in line]
        assert not missing, f"{program} started without {missing}: {line}"


@pytest.mark.parametrize("form", FORMS)
def test_a_push_runs_none_of_the_origins_programs(
    tmp_path: Path, origin: HostileOrigin, trace: Path, form: str
) -> None:
    ws, repo = _ws(tmp_path), _named(origin, form)
    _, base = ws.resolve_base(repo, None)
    workdir = ws.checkout("run-1", repo, base)
    (workdir / "artifact.md").write_text("draft\n")
    sha = ws.commit(workdir, "produce: draft", WHEN)

    ws.publish(workdir, "run-1", sha)
    assert ws.push_branch(workdir, "loops/run-1", sha, "run-1") == sha
    ws.push_leased(workdir, "graphs/g-1", sha, expected=None)

    assert origin.ran() == []
    for ref in (work_ref("run-1"), "refs/heads/loops/run-1", "refs/heads/graphs/g-1"):
        assert git("rev-parse", ref, cwd=origin.path) == sha
    assert_started_hardened(trace, "receive-pack")


@pytest.mark.parametrize("form", FORMS)
def test_a_clone_runs_none_of_the_origins_programs(
    tmp_path: Path, origin: HostileOrigin, trace: Path, form: str
) -> None:
    ws, repo = _ws(tmp_path), _named(origin, form)
    base = git("rev-parse", "main", cwd=origin.path)
    workdir = ws.checkout("run-1", repo, base)

    assert (workdir / "README.md").read_text() == "# a project\n"
    assert origin.ran() == []
    assert_started_hardened(trace, "upload-pack")


@pytest.mark.parametrize("form", FORMS)
def test_a_fetch_runs_none_of_the_origins_programs(
    tmp_path: Path, origin: HostileOrigin, trace: Path, form: str
) -> None:
    ws, repo = _ws(tmp_path), _named(origin, form)
    base = git("rev-parse", "main", cwd=origin.path)
    ws.checkout("run-1", repo, base)
    # A commit the clone lacks, pushed by someone else: the next checkout fetches it.
    other = _ws(tmp_path / "other")
    elsewhere = other.checkout("run-2", repo, base)
    (elsewhere / "notes.md").write_text("more\n")
    newer = other.commit(elsewhere, "more", WHEN)
    other.push_branch(elsewhere, "main", newer)
    trace.unlink()
    origin.forget()

    assert (ws.checkout("run-1", repo, newer) / "notes.md").read_text() == "more\n"
    # A URL origin is read through a cache, fetched into.
    assert ws.read_file(origin.path.as_uri(), newer, "notes.md") == "more\n"
    assert origin.ran() == []
    assert_started_hardened(trace, "upload-pack")


@pytest.mark.parametrize("form", FORMS)
def test_ls_remote_runs_none_of_the_origins_programs(
    tmp_path: Path, origin: HostileOrigin, trace: Path, form: str
) -> None:
    ws, repo = _ws(tmp_path), _named(origin, form)
    head = git("rev-parse", "main", cwd=origin.path)

    assert ws.resolve_base(repo, None) == ("main", head)
    assert ws.resolve_base(repo, "main") == ("main", head)
    assert ws.branch_head(repo, "main") == head
    assert origin.ran() == []
    assert_started_hardened(trace, "upload-pack")


def test_reading_an_origin_in_place_runs_none_of_its_programs(
    tmp_path: Path, origin: HostileOrigin
) -> None:
    """A path origin is read where it is (its log, its trees, its playbook's history):
    its main carries a signature, and its config says to verify it with its own program."""
    ws = PlaybookStore.of(_ws(tmp_path))
    repo = str(origin.path)
    head = git("rev-parse", "main", cwd=origin.path)

    ws.write_version(repo, Playbook(name="p", version=1), "batch-1", "a test", WHEN)
    origin.forget()  # what its push ran: test_a_push_runs_none_of_the_origins_programs

    assert ws.branch_log(repo, "main") == ["Initial commit"]
    assert ws.list_files(repo, head) == [".gitattributes", "README.md"]
    assert ws.read_file_at_ref(repo, "refs/heads/main", "README.md") == "# a project\n"
    assert [v.version for v in ws.versions(repo, "p")] == [1]
    assert ws.at_version(repo, "p", 1) is not None
    assert origin.ran() == []


def test_an_origins_proc_receive_hook_never_runs(tmp_path: Path, origin: HostileOrigin) -> None:
    """An origin that hands our refs to its proc-receive hook cannot be pushed to (without
    the hook, receive-pack refuses them): the push fails, and the hook never ran."""
    git("config", "receive.procReceiveRefs", "refs/loopworks", cwd=origin.path)
    ws, repo = _ws(tmp_path), str(origin.path)
    _, base = ws.resolve_base(repo, None)
    workdir = ws.checkout("run-1", repo, base)
    (workdir / "artifact.md").write_text("draft\n")
    sha = ws.commit(workdir, "produce: draft", WHEN)

    with pytest.raises(GitError):
        ws.publish(workdir, "run-1", sha)
    assert origin.ran() == []


def test_a_checked_out_branch_is_never_updated_in_place(tmp_path: Path) -> None:
    """A repository with a work tree that takes pushes to its checked-out branch into that
    tree (receive.denyCurrentBranch=updateInstead) would run its push-to-checkout hook and
    its filters: such a push is refused, as git refuses it by default."""
    markers = tmp_path / "markers"
    markers.mkdir()
    repo = tmp_path / "project"
    repo.mkdir()
    (repo / "README.md").write_text("# a project\n")
    (repo / ".gitattributes").write_text("* filter=evil\n")
    git("init", "--quiet", "--initial-branch=main", cwd=repo)
    git("add", "-A", cwd=repo)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "init", cwd=repo)
    git("config", "receive.denyCurrentBranch", "updateInstead", cwd=repo)
    git("config", "filter.evil.smudge", program(markers, "filter-smudge"), cwd=repo)
    git("config", "filter.evil.clean", program(markers, "filter-clean"), cwd=repo)
    hook = repo / ".git" / "hooks" / "push-to-checkout"
    hook.write_text(f'#!/bin/sh\necho ran >> "{markers / "push-to-checkout"}"\n')
    hook.chmod(0o755)
    ws = _ws(tmp_path)
    _, base = ws.resolve_base(str(repo), None)
    workdir = ws.checkout("run-1", str(repo), base)
    (workdir / "artifact.md").write_text("draft\n")
    sha = ws.commit(workdir, "produce: draft", WHEN)

    refused = _failure(lambda: ws.push_branch(workdir, "main", sha))
    assert sorted(p.name for p in markers.iterdir()) == []
    assert "refusing to update checked out branch" in refused
    assert not (repo / "artifact.md").exists()
    # Any other branch is pushed as ever.
    assert ws.push_branch(workdir, "loops/run-1", sha) == sha


def test_a_partial_clones_promisor_is_never_asked(tmp_path: Path) -> None:
    """A partial clone fetches the objects it lacks from its promisor remote as its config
    says (url, uploadpack, sshCommand, credential helper): reading one in place must not."""
    markers = tmp_path / "markers"
    markers.mkdir()
    source = bare_remote(tmp_path / "source")
    git("config", "uploadpack.allowFilter", "true", cwd=source)
    partial = tmp_path / "partial.git"
    git("clone", "--quiet", "--bare", "--filter=tree:0", source.as_uri(), str(partial))
    git("config", "remote.origin.url", str(source), cwd=partial)
    git("config", "remote.origin.uploadpack", program(markers, "promisor"), cwd=partial)
    head = git("rev-parse", "main", cwd=partial)

    with pytest.raises(GitError):
        _ws(tmp_path).list_files(str(partial), head)  # its trees are not there
    assert sorted(p.name for p in markers.iterdir()) == []


def test_a_clone_whose_tree_is_a_repository_is_never_used_as_one(
    tmp_path: Path, origin: HostileOrigin
) -> None:
    """A clone's content can be a whole repository at its root (HEAD, objects/, refs/ and
    a config naming programs). Should the clone's own .git go (a data directory is a
    cache), git must not take the work tree for a repository and run what it names."""
    ws = _ws(tmp_path)
    repo = str(bare_remote(tmp_path / "plain"))
    _, base = ws.resolve_base(repo, None)
    workdir = ws.checkout("run-1", repo, base)
    shutil.rmtree(workdir / ".git")
    shutil.copytree(origin.path, workdir, dirs_exist_ok=True, symlinks=True)
    # A signed merge that `merge_commit_of` would find and git would verify.
    task_commit = git("rev-parse", "main", cwd=origin.path)
    tree = git("rev-parse", "main^{tree}", cwd=origin.path)
    message = f"Merge\n\nTask-Commit: {task_commit}"
    merge = signed_commit(workdir, tree, [task_commit, task_commit], message)

    refused = _failure(lambda: ws.merge_commit_of(workdir, merge, task_commit))
    assert origin.ran() == []
    assert "cannot use bare repository" in refused
