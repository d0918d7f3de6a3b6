"""A playbook's files in a run's checkout (docs/playbook.md#files): the helpers and notes
the items a run was given name, written beside the run's own files and never committed
unless the run changes them.

A checkout writes each file that is not there already (a file the run's tree holds wins)
and lists what it wrote, with its blob id, in the clone's git dir, where no commit and no
`git clean` reaches. A commit stages the whole tree as ever, then takes back out of the
index every listed file whose content is still what was written: a file the run edited
is committed like any other change. Each checkout starts the list again.

Plain synchronous code (no Temporal imports), like the rest of the workspace.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pygit2

from loopworks.schemas.playbook import FILE_MAX_CHARS
from loopworks.workspace import files
from loopworks.workspace.objects import open_repository
from loopworks.workspace.runner import GitError

# In the clone's git dir: written by the checkout, read by the commit.
LIST_NAME = "loopworks-playbook-files.json"
# The largest playbook file read back: four bytes a character of the largest stored.
READ_CAP = FILE_MAX_CHARS * 4


def _list_path(workdir: Path) -> Path:
    return workdir / ".git" / LIST_NAME


def forget(workdir: Path) -> None:
    """No file of a playbook's is in the checkout (a new checkout starts here)."""
    _list_path(workdir).unlink(missing_ok=True)


def written(workdir: Path) -> dict[str, str]:
    """The playbook's files this checkout wrote: path to blob id."""
    try:
        listed = json.loads(_list_path(workdir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(listed, dict):
        return {}
    return {str(path): str(blob) for path, blob in listed.items()}


def read_blobs(repository: str, wanted: Mapping[str, str]) -> dict[str, bytes]:
    """Each of `wanted` (path to blob id) whose blob the repository holds: path to bytes."""
    try:
        repo = open_repository(repository)
    except GitError:
        return {}
    found = {}
    for path, blob in wanted.items():
        obj = repo.get(blob)
        if isinstance(obj, pygit2.Blob):
            found[path] = obj.data
    return found


def write(workdir: Path, blobs: Mapping[str, bytes], wanted: Mapping[str, str]) -> dict[str, str]:
    """Write each of `blobs` (path to content) the checkout has nothing at; list them and
    return what was written (path to blob id). A file of `wanted` with no blob is an
    error: the playbook's version names a file its repository lacks."""
    if missing := sorted(set(wanted) - set(blobs)):
        raise GitError(f"the playbook's {', '.join(missing)} are not in the repository")
    done: dict[str, str] = {}
    for path, data in sorted(blobs.items()):
        if files.lexists(workdir, path):
            continue
        files.write_bytes(workdir, path, data)
        done[path] = str(pygit2.hash(data))
    _list_path(workdir).write_text(json.dumps(done, sort_keys=True), encoding="utf-8")
    return done


def unchanged(workdir: Path) -> set[str]:
    """The playbook's files in the checkout as they were written: not the run's work."""
    found = set()
    for path, blob in written(workdir).items():
        try:
            data = files.read_bytes(workdir, path, READ_CAP, follow=False)
        except (OSError, files.UnsafePath):
            continue
        if str(pygit2.hash(data)) == blob:
            found.add(path)
    return found


def unstage_unchanged(workdir: Path) -> None:
    """Take out of the index (after `git add -A`) each of the playbook's files staged as
    it was written: the commit then holds only what the run changed."""
    listed = written(workdir)
    if not listed:
        return
    repo = open_repository(workdir)
    try:
        index = repo.index
        index.read()
        dropped = False
        for path, blob in listed.items():
            entry = index[path] if path in index else None  # noqa: SIM401
            if entry is not None and str(entry.id) == blob:
                index.remove(path)
                dropped = True
        if dropped:
            index.write()
    except pygit2.GitError as exc:
        raise GitError(f"unstaging the playbook's files in {workdir} failed: {exc}") from exc
