"""The playbook store on real repositories: a bare origin (read through a `file://` URL and
so through the object cache) and a non-bare one (read in place)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopworks.playbook.store import PlaybookStore, PlaybookVersionError
from loopworks.schemas.playbook import (
    PLAYBOOK_BRANCH,
    PLAYBOOK_PATH,
    ItemKind,
    Playbook,
    PlaybookItem,
    VersionWrite,
    item_id,
)
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.integration import BranchMovedError
from loopworks.workspace.runner import GitError
from loopworks.workspace.stores import own_origin_store
from tests.integration.stack import GitCalls, git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NAME = "app-1234abcd"
REF = f"refs/heads/{PLAYBOOK_BRANCH}"


def _store(tmp_path: Path, name: str = "worker-a") -> PlaybookStore:
    return PlaybookStore.of(GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com"))


@pytest.fixture(params=["bare", "non-bare", "own"])
def origin(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A `file://` URL of a bare origin, the path of a non-bare one, or the path of the
    service's own origin (written in place, workspace/stores.py); all with `main`."""
    bare = tmp_path / "origin.git"
    GitWorkspaces(tmp_path / "setup", "t", "t@example.com").ensure_default_origin(bare)
    if request.param == "bare":
        return bare.as_uri()
    if request.param == "own":
        return str(bare)
    work = tmp_path / "work"
    git("clone", "--quiet", str(bare), str(work))
    return str(work)


def _git_dir(origin: str) -> str:
    path = Path(origin.removeprefix("file://"))
    return str(path / ".git") if (path / ".git").exists() else str(path)


def _git(origin: str, *args: str) -> str:
    return git("--git-dir", _git_dir(origin), *args)


def _version(version: int, *contents: str) -> Playbook:
    items = [
        PlaybookItem(
            id=item_id(version, n),
            kind=ItemKind.CONSTRAINT,
            section="testing",
            content=content,
            created_in=version,
            updated_in=version,
        )
        for n, content in enumerate(contents, start=1)
    ]
    return Playbook(name=NAME, version=version, items=items)


def _write_three(store: PlaybookStore, origin: str) -> list[str]:
    versions = [_version(1, "a"), _version(2, "a", "b"), _version(3, "a", "b", "c")]
    return [
        store.write_version(origin, pb, f"batch-{pb.version}", "run-1", WHEN + timedelta(n))
        for n, pb in enumerate(versions)
    ]


def test_no_branch_reads_as_nothing(tmp_path: Path, origin: str) -> None:
    store = _store(tmp_path)
    assert store.current(origin, NAME) is None
    assert store.at_version(origin, NAME, 1) is None
    assert store.versions(origin, NAME) == []


def test_first_write_makes_an_orphan_branch_with_only_the_playbook(
    tmp_path: Path, origin: str
) -> None:
    store = _store(tmp_path)
    first = _version(1, "run the tests with -x")
    sha = store.write_version(origin, first, "batch-1", "run-1", WHEN)

    assert _git(origin, "rev-parse", REF) == sha
    assert _git(origin, "ls-tree", "-r", "--name-only", sha).splitlines() == [PLAYBOOK_PATH]
    assert _git(origin, "show", f"{sha}:{PLAYBOOK_PATH}") == first.to_jsonl().strip()
    # No parents, and nothing in common with the code's history.
    assert _git(origin, "rev-list", "--parents", "-n", "1", sha) == sha
    code = set(_git(origin, "rev-list", "refs/heads/main").split())
    assert code and not code & set(_git(origin, "rev-list", sha).split())
    message = _git(origin, "show", "-s", "--format=%B", sha)
    assert message.splitlines()[0] == f"playbook {NAME} v1: batch-1"
    assert "Playbook-Version: 1\nPlaybook-Batch: batch-1\nPlaybook-Source: run-1" in message
    assert _git(origin, "show", "-s", "--format=%cI", sha) == "2024-05-01T12:00:00+00:00"
    assert store.current(origin, NAME) == first
    git("--git-dir", _git_dir(origin), "fsck", "--strict", "--no-dangling")


def test_in_place_and_pushed_writes_make_the_same_commits(tmp_path: Path) -> None:
    """The service's own origin and an origin pushed to get the very same objects: a
    version's sha does not depend on how it reached origin."""
    made = []
    for name in ("own", "pushed"):
        bare = tmp_path / name / "origin.git"
        GitWorkspaces(tmp_path / name / "setup", "t", "t@example.com").ensure_default_origin(bare)
        origin = str(bare) if name == "own" else bare.as_uri()
        store = _store(tmp_path / name)
        made.append(
            [
                store.write_version(origin, pb, f"b-{pb.version}", "run", WHEN)
                for pb in (_version(1, "a"), _version(2, "a", "b"))
            ]
        )
    assert own_origin_store(str(tmp_path / "own" / "origin.git")) is not None
    assert made[0] == made[1]


def test_versions_newest_first_and_any_version_readable(tmp_path: Path, origin: str) -> None:
    store = _store(tmp_path)
    shas = _write_three(store, origin)

    listed = store.versions(origin, NAME)
    assert [v.version for v in listed] == [3, 2, 1]
    assert [v.commit for v in listed] == shas[::-1]
    assert [v.batch_id for v in listed] == ["batch-3", "batch-2", "batch-1"]
    assert [v.items for v in listed] == [3, 2, 1]
    assert {v.source for v in listed} == {"run-1"}
    assert listed[0].committed_at == "2024-05-03T12:00:00+00:00"

    second = store.at_version(origin, NAME, 2)
    assert second == _version(2, "a", "b")
    assert store.at_version(origin, NAME, 4) is None
    with GitCalls() as calls:
        current = store.current(origin, NAME)
    assert current is not None and current.version == 3
    assert [item.content for item in current.items] == ["a", "b", "c"]
    # The head and its file, not a walk of the branch's history, and no process but a
    # URL's cache fetching first (branches move): every run's hydration reads this.
    assert not calls.processes.keys() - {"fetch"}, calls.processes
    assert not calls.in_process.keys() - {"rev-parse", "cat-file"}, calls.in_process


def test_a_head_without_a_version_is_refused(tmp_path: Path, origin: str) -> None:
    store = _store(tmp_path)
    _write_three(store, origin)
    head = _git(origin, "rev-parse", REF)
    tree = _git(origin, "rev-parse", f"{head}^{{tree}}")
    stray = _git(origin, "commit-tree", tree, "-p", head, "-m", "edited by hand")
    _git(origin, "update-ref", REF, stray)
    with pytest.raises(GitError, match="not written by the playbook's writer"):
        store.current(origin, NAME)


def test_a_retried_write_returns_the_same_commit_and_makes_none(
    tmp_path: Path, origin: str
) -> None:
    store = _store(tmp_path)
    pb = _version(1, "a")
    sha = store.write_version(origin, pb, "batch-1", "run-1", WHEN)
    # Another worker (its own clone) retrying the same activity, even at a later time.
    again = _store(tmp_path, "worker-b").write_version(
        origin, pb, "batch-1", "run-1", WHEN + timedelta(minutes=5)
    )
    assert again == sha
    assert store.write_version(origin, pb, "batch-1", "run-1", WHEN) == sha
    assert _git(origin, "rev-list", "--count", REF) == "1"


def test_consecutive_versions_go_in_one_swap_each_a_commit_of_its_own(
    tmp_path: Path, origin: str
) -> None:
    store = _store(tmp_path)
    store.write_version(origin, _version(1, "a"), "batch-1", "run-1", WHEN)
    writes = [
        VersionWrite(playbook=_version(2, "a", "b"), batch_id="batch-2", source="run-2"),
        VersionWrite(playbook=_version(3, "a", "b", "c"), batch_id="batch-3", source="run-3"),
    ]
    with GitCalls() as calls:
        shas = store.write_versions(origin, writes, WHEN)
    if own_origin_store(origin) is None:
        assert calls.processes["push"] == 1
    else:
        # In place: one compare-and-swap of the ref, and no process at all.
        assert calls.in_process["update-ref"] == 1
        assert calls.processes == Counter(), calls.processes
    assert _git(origin, "rev-list", "--first-parent", REF).split()[:2] == shas[::-1]
    assert [(v.version, v.batch_id, v.items) for v in store.versions(origin, NAME)] == [
        (3, "batch-3", 3),
        (2, "batch-2", 2),
        (1, "batch-1", 1),
    ]
    # A retry, on a worker that never saw them: the same commits, nothing new.
    assert _store(tmp_path, "worker-b").write_versions(origin, writes, WHEN) == shas
    assert _git(origin, "rev-list", "--count", REF) == "3"
    with pytest.raises(ValueError, match="not consecutive"):
        store.write_versions(origin, writes[::-1], WHEN)


def test_a_write_that_does_not_follow_the_head_raises(tmp_path: Path, origin: str) -> None:
    store = _store(tmp_path)
    with pytest.raises(PlaybookVersionError, match="does not exist"):
        store.write_version(origin, _version(2, "a"), "batch-2", "run-1", WHEN)
    _write_three(store, origin)
    head = _git(origin, "rev-parse", REF)
    with pytest.raises(PlaybookVersionError, match="is at v3"):
        store.write_version(origin, _version(3, "x"), "other-batch", "run-2", WHEN)
    with pytest.raises(PlaybookVersionError, match="is at v3"):
        store.write_version(origin, _version(5, "x"), "batch-5", "run-2", WHEN)
    assert _git(origin, "rev-parse", REF) == head


def test_a_branch_moved_between_read_and_push_is_not_overwritten(
    tmp_path: Path, origin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    first = store.write_version(origin, _version(1, "a"), "batch-1", "run-1", WHEN)
    # Someone else's v2 lands after this writer read v1 as the head.
    theirs = _store(tmp_path, "worker-b").write_version(
        origin, _version(2, "theirs"), "batch-x", "run-x", WHEN
    )
    if own_origin_store(origin) is None:
        reads = iter([first])
        real = store._fetch_head
        monkeypatch.setattr(store, "_fetch_head", lambda w, o: next(reads, None) or real(w, o))
    else:
        stale = iter([(first, {"Playbook-Version": "1", "Playbook-Batch": "batch-1"})])
        read = store._head_in
        monkeypatch.setattr(store, "_head_in", lambda g: next(stale, None) or read(g))
    with pytest.raises(BranchMovedError):
        store.write_version(origin, _version(2, "mine"), "batch-2", "run-1", WHEN)
    assert _git(origin, "rev-parse", REF) == theirs
