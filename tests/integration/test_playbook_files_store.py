"""A playbook's files on real repositories (docs/playbook.md#files): a version's commit holds
them beside the playbook, a run's checkout is given them, and its commits hold them only
when the run changed them."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.playbook.store import PlaybookStore
from loopworks.schemas.playbook import (
    PLAYBOOK_BRANCH,
    PLAYBOOK_PATH,
    ItemKind,
    Playbook,
    PlaybookFiles,
    PlaybookItem,
    VersionWrite,
    blob_id,
)
from loopworks.schemas.steps import GitLocation
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.runner import GitError
from tests.integration.stack import git

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
NAME = "app-1234abcd"
HELPER = ".loops/skills/count_words.py"
CODE = "print('count')\n"


def _ws(tmp_path: Path, name: str) -> GitWorkspaces:
    return GitWorkspaces(tmp_path / name, "loopworks-test", "loops@example.com")


@pytest.fixture(params=["bare", "own"])
def origin(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A `file://` URL of a bare origin (pushed to, read through a cache), or the service's
    own origin (written in place)."""
    bare = tmp_path / "origin.git"
    _ws(tmp_path, "setup").ensure_default_origin(bare)
    return bare.as_uri() if request.param == "bare" else str(bare)


def _learnt(store: PlaybookStore, origin: str) -> tuple[Playbook, str]:
    """Version 1 on origin: a skill naming the helper, stored with it."""
    item = PlaybookItem(
        id="pb-1-1",
        kind=ItemKind.SKILL,
        section="skills",
        content=f"Run `python3 {HELPER}`",
        created_in=1,
        updated_in=1,
        files=[HELPER],
    )
    playbook = Playbook(name=NAME, version=1, items=[item], files={HELPER: blob_id(CODE)})
    write = VersionWrite(playbook=playbook, batch_id="b1", source="run-1", contents={HELPER: CODE})
    (commit,) = store.write_versions(origin, [write], WHEN)
    read, at = store.located(origin, NAME, None)
    assert read is not None and at == commit
    assert store.located(origin, NAME, 1) == (read, commit)
    return read, commit


def test_a_version_holds_its_items_files_beside_the_playbook(tmp_path: Path, origin: str) -> None:
    store = PlaybookStore.of(_ws(tmp_path, "writer"))
    read, _ = _learnt(store, origin)
    assert read.files == {HELPER: blob_id(CODE)}
    git_dir = origin.removeprefix("file://")
    listed = git("--git-dir", git_dir, "ls-tree", "-r", "--name-only", PLAYBOOK_BRANCH)
    assert sorted(listed.split()) == sorted([PLAYBOOK_PATH, HELPER])
    assert git("--git-dir", git_dir, "show", f"{PLAYBOOK_BRANCH}:{HELPER}") + "\n" == CODE
    assert store.at_version(origin, NAME, 1) == read

    # Version 2 without the item: its file goes too; v1's blob is reused by a rollback.
    empty = Playbook(name=NAME, version=2)
    store.write_version(origin, empty, "b2", "alice", WHEN)
    listed = git("--git-dir", git_dir, "ls-tree", "-r", "--name-only", PLAYBOOK_BRANCH)
    assert listed.split() == [PLAYBOOK_PATH]
    back = read.model_copy(update={"version": 3})
    store.write_version(origin, back, "rollback:3:to:1", "rollback to v1", WHEN)
    current = store.current(origin, NAME)
    assert current is not None and current.files == read.files

    # A file the repository lacks and the write does not bring fails the version.
    lost = read.model_copy(update={"version": 4, "files": {HELPER: "ab" * 20}})
    with pytest.raises(GitError, match="no blob"):
        store.write_version(origin, lost, "b4", "x", WHEN)


def test_a_checkout_is_given_the_files_and_commits_only_what_the_run_changed(
    tmp_path: Path, origin: str
) -> None:
    read, commit = _learnt(PlaybookStore.of(_ws(tmp_path, "writer")), origin)
    given = PlaybookFiles(commit=commit, files=read.files)
    ws = _ws(tmp_path, "worker")
    _, base = ws.resolve_base(origin, None)
    location = GitLocation(origin=origin, commit=base, playbook_files=given)

    workdir = ws.checkout_at("r1", location)
    assert (workdir / HELPER).read_text() == CODE
    (workdir / "artifact.md").write_text("# work\n")
    assert ws.changed_paths(workdir) == ["artifact.md"]
    first = ws.commit(workdir, "produce", WHEN)
    assert HELPER not in git("ls-tree", "-r", "--name-only", first, cwd=workdir).split()

    # Edited by the run, it is the run's work.
    workdir = ws.checkout_at("r1", location.model_copy(update={"commit": first}))
    (workdir / HELPER).write_text(CODE + "print('more')\n")
    assert ws.changed_paths(workdir) == [HELPER]
    second = ws.commit(workdir, "refine", WHEN)
    assert git("show", f"{second}:{HELPER}", cwd=workdir) == CODE + "print('more')"

    # The run's own file at that path wins over the playbook's.
    workdir = ws.checkout_at("r1", location.model_copy(update={"commit": second}))
    assert (workdir / HELPER).read_text() == CODE + "print('more')\n"
    assert ws.changed_paths(workdir) == []

    # A checkout without the playbook's files has none.
    workdir = ws.checkout("r1", origin, first)
    assert not (workdir / HELPER).exists()
    assert ws.commit(workdir, "close", WHEN) != first  # a new commit, the same tree
    assert HELPER not in git("ls-tree", "-r", "--name-only", "HEAD", cwd=workdir).split()
