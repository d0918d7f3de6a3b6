"""A task graph's integration branch on origin: created once, merged into one task at a
time, and only ever moved by a compare-and-swap push.

Plain synchronous code (no Temporal imports), like workspace/git.py, which it extends
rather than grows: activities/integration.py runs each whole operation in one thread.
Below the git part, the ledger's files (docs/graphs.md#the-ledger), edited in a clone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Self

from loopworks.schemas.steps import ARTIFACT_PATH, RECORDS_DIR
from loopworks.schemas.tasks import (
    ARCHIVE_AFTER,
    ARCHIVE_PATH,
    LEDGER_PATH,
    LedgerLine,
    TaskStatus,
    latest_lines,
    ledger_lines,
    ledger_sha256,
    task_file,
)
from loopworks.workspace import files
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.objects import (
    commit_message_of,
    commit_of,
    open_repository,
    read_path,
    tree_of,
    write_commit,
)
from loopworks.workspace.refs import checked_commit, checked_run_id, redact
from loopworks.workspace.runner import GitError, _file_lock

# Every loop writes these at its repository root; in a task graph they are moved under
# the task's own directory.
ROOT_ARTIFACT = ARTIFACT_PATH
ROOT_RECORDS = RECORDS_DIR
_RELOCATED = {ROOT_ARTIFACT: "artifact.md", ROOT_RECORDS: "loops"}
# The ledger and archive are read whole into the worker; past these, the step fails.
LEDGER_CAP_BYTES = 64 << 20
TASK_FILE_CAP_BYTES = 1 << 20
_TRAILER = re.compile(r"^([A-Za-z0-9-]+): (.*)$")


def message_trailers(message: str) -> dict[str, str]:
    """The `Key: value` lines of a commit message (the last of a repeated key wins)."""
    found = (_TRAILER.match(line) for line in message.splitlines())
    return {m.group(1): m.group(2).strip() for m in found if m}


def integration_branch(graph_id: str) -> str:
    return f"graphs/{graph_id}"


def task_dir(task_id: str) -> str:
    """Where a task's artifact and loop records land on the integration branch."""
    return f"docs/tasks/{task_id}"


class BranchMovedError(GitError):
    """The branch moved between reading its head and pushing: another writer got there
    first. Retryable: the next attempt starts again from the new head."""


@dataclass(frozen=True)
class MergeAttempt:
    """A `git merge --no-commit` left in the workdir: clean (`conflicts` empty, the
    merged tree in `tree`) or aborted (`conflicts` names the paths, `output` git's words)."""

    conflicts: list[str]
    output: str
    tree: str | None = None


@dataclass(frozen=True)
class Changes:
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


class IntegrationWorkspaces(GitWorkspaces):
    """GitWorkspaces plus what a merge queue needs: branch heads, merges, leased pushes."""

    # `fetched_branch` reads a task branch as the clone's checkout fetched it.
    fetches_branches = True
    writes_through = False

    @classmethod
    def of(cls, workspaces: GitWorkspaces) -> Self:
        """The same clones, identity and git access as `workspaces` (the worker injects a
        GitWorkspaces)."""
        return cls(
            workspaces.root,
            workspaces.author_name,
            workspaces.author_email,
            workspaces.max_clone_bytes,
            credentials=workspaces.credentials,
            origin_check=workspaces.origin_check,
            user_helpers=workspaces.user_helpers,
        )

    @contextmanager
    def locked(self, key: str, slot: str) -> Iterator[None]:
        """Hold the clone (key, slot) alone: an attempt that timed out may still be
        running in its thread when its retry starts on the same worker."""
        name = f"{checked_run_id(key)}.{checked_run_id(slot)}"
        with _file_lock(self.root / ".locks" / f"{name}.lock"):
            yield

    # -- branches on origin ------------------------------------------------------------

    def branch_head(self, origin: str, branch: str) -> str | None:
        """The sha `branch` points to on origin now, None when it does not exist."""
        ref = f"refs/heads/{branch}"
        self._check_ref(ref)
        rows = self._ls_remote(origin, ref)
        return next((r[0] for r in rows if len(r) == 2 and r[1] == ref), None)

    def push_leased(self, workdir: Path, branch: str, commit: str, expected: str | None) -> None:
        """Push `commit` to `branch` only if origin still has it at `expected` (None: only
        if it does not exist), so a concurrent writer is never overwritten."""
        ref = f"refs/heads/{branch}"
        self._check_ref(ref)
        checked_commit(commit)
        lease = f"--force-with-lease={ref}:{expected or ''}"
        url = self.origin_url(workdir)
        push = [*self._reaching(url, "push", "--quiet", "--no-verify"), lease]
        proc = self._git([*push, "origin", f"{commit}:{ref}"], cwd=workdir, check=False)
        if proc.returncode == 0:
            return  # the lease held: origin moved the branch to `commit`
        remote = self.branch_head(url, branch)
        if remote == commit:
            return  # an earlier attempt pushed the very same commit
        if proc.returncode != 0 and remote != expected:
            raise BranchMovedError(
                f"{ref} on {redact(url)} is at {remote}, not {expected}: another writer moved it"
            )
        raise GitError(f"push of {commit} to {ref} failed: {redact(proc.stderr.strip())}")

    def fetched_branch(self, workdir: Path, branch: str) -> str | None:
        """The sha of origin's `branch` as the clone's last fetch saw it (None: absent)."""
        ref = f"refs/remotes/origin/{branch}"
        self._check_ref(ref)
        return commit_of(open_repository(workdir), f"{ref}^{{commit}}")

    # -- merging -----------------------------------------------------------------------

    def is_ancestor(self, workdir: Path, commit: str, of: str) -> bool:
        args = ["merge-base", "--is-ancestor", checked_commit(commit), checked_commit(of)]
        return self._git(args, cwd=workdir, check=False).returncode == 0

    def merge_commit_of(self, workdir: Path, head: str, task_commit: str) -> str | None:
        """The merge on `head`'s first-parent line that brought `task_commit` in (found by
        its `Task-Commit` trailer), the oldest if several did; None without one."""
        checked_commit(task_commit)
        out = self._git(
            [
                "log",
                "--first-parent",
                "--merges",
                "--format=%H",
                "--fixed-strings",
                f"--grep=Task-Commit: {task_commit}",
                checked_commit(head),
                "--",
            ],
            cwd=workdir,
        ).stdout.split()
        return out[-1] if out else None

    def trailers(self, workdir: Path, commit: str) -> dict[str, str]:
        """The `Key: value` lines of a commit's message (the last of a repeated key wins)."""
        message = commit_message_of(open_repository(workdir), checked_commit(commit))
        return message_trailers(message)

    def first_parent(self, workdir: Path, commit: str) -> str:
        ref = f"{checked_commit(commit)}^1"
        found = commit_of(open_repository(workdir), ref)
        if found is None:
            raise GitError(f"{commit} has no first parent in {workdir}")
        return found

    def relocate_records(
        self, workdir: Path, task_commit: str, onto: str, task_id: str, when: datetime
    ) -> str:
        """A commit on `task_commit` that moves its artifact.md and .loops/ under
        docs/tasks/<task id>/ (as artifact.md and loops/), leaving the root paths as the
        merge base with `onto` had them; `task_commit` itself when there is nothing to move.

        Every loop writes artifact.md and .loops/ at its repository root. Merged as they
        are, two parallel tasks would both add them: every second merge would conflict on
        paths neither task was about, and a task that did merge would overwrite the records
        of the ones before it. Under the task's directory, beside its docs/tasks/<id>.json,
        each task's artifact and records stay readable and no two tasks share a path.
        """
        base = self._git(
            ["merge-base", checked_commit(onto), checked_commit(task_commit)], cwd=workdir
        ).stdout.strip()
        self._git(["checkout", "--quiet", "--detach", "--force", task_commit], cwd=workdir)
        self._git(["clean", "-ffdxq"], cwd=workdir)
        for root_path, name in _RELOCATED.items():
            if not files.lexists(workdir, root_path):
                continue
            # The paths are the task's tree: a symlink on the way to them is refused.
            target = f"{task_dir(task_id)}/{name}"
            files.remove(workdir, target)
            files.rename(workdir, root_path, target)
            if self._has_path(workdir, base, root_path):
                self._git(["checkout", "--quiet", base, "--", root_path], cwd=workdir)
        if not self.changed_paths(workdir):
            return task_commit
        # The repository's .gitignore must not drop a task's records on the way.
        self._git(["add", "--all", "--force", "--", task_dir(task_id)], cwd=workdir)
        message = f"Relocate {task_id}'s artifact.md and .loops/ under {task_dir(task_id)}/"
        return self.commit(workdir, message, when)

    def changed_since_fork(self, workdir: Path, head: str, task_commit: str) -> list[str]:
        """The paths `task_commit` changed since it left `head`'s line: its own work."""
        base = self._git(
            ["merge-base", checked_commit(head), checked_commit(task_commit)], cwd=workdir
        ).stdout.strip()
        out = self._git(
            ["diff", "--name-only", "--no-renames", "-z", checked_commit(base), task_commit],
            cwd=workdir,
        ).stdout
        return sorted(path for path in out.split("\0") if path)

    def merge(self, workdir: Path, head: str, theirs: str) -> MergeAttempt:
        """`git merge --no-ff --no-commit theirs` on a clean checkout of `head`. Clean: the
        merge is left in the workdir (for the verification command) and its tree named.
        Conflicting: aborted, the workdir back at `head`, the unmerged paths named."""
        self._git(["checkout", "--quiet", "--detach", "--force", checked_commit(head)], cwd=workdir)
        self._git(["clean", "-ffdxq"], cwd=workdir)
        proc = self._git(
            ["merge", "--no-ff", "--no-commit", "--no-edit", checked_commit(theirs)],
            cwd=workdir,
            check=False,
        )
        output = "\n".join(s for s in (proc.stdout.strip(), proc.stderr.strip()) if s)
        if proc.returncode == 0:
            tree = self._git(["write-tree"], cwd=workdir).stdout.strip()
            return MergeAttempt(conflicts=[], output=output, tree=tree)
        unmerged = self._git(["diff", "--name-only", "-z", "--diff-filter=U"], cwd=workdir).stdout
        conflicts = sorted({path for path in unmerged.split("\0") if path})
        self._git(["merge", "--abort"], cwd=workdir, check=False)
        self._git(["checkout", "--quiet", "--detach", "--force", head], cwd=workdir)
        if not conflicts:
            raise GitError(f"merging {theirs} into {head} failed: {redact(output)}")
        return MergeAttempt(conflicts=conflicts, output=output)

    def commit_merge(
        self, workdir: Path, tree: str, parents: list[str], message: str, when: datetime
    ) -> str:
        """The merge commit of `tree`: same tree, parents, message and `when`, same sha.

        Made from the tree written before the verification command ran, so nothing the
        command leaves in the workdir can slip into it.
        """
        author = (self.author_name, self.author_email)
        repo = open_repository(workdir)
        checked = [checked_commit(parent) for parent in parents]
        return write_commit(repo, checked_commit(tree), checked, message, author, when)

    def changes(self, workdir: Path, old: str, new: str, excluded: str) -> Changes:
        """Paths added, modified and deleted from `old` to `new`, outside `excluded/`."""
        out = self._git(
            [
                "diff",
                "--name-status",
                "--no-renames",
                "-z",
                checked_commit(old),
                checked_commit(new),
                "--",
                ".",
                f":(exclude){excluded}/",
            ],
            cwd=workdir,
        ).stdout.split("\0")
        kinds: dict[str, list[str]] = {"A": [], "M": [], "T": [], "D": []}
        for status, path in zip(out[0::2], out[1::2], strict=False):
            if status[:1] in kinds and path:
                kinds[status[:1]].append(path)
        return Changes(
            added=sorted(kinds["A"]),
            modified=sorted(kinds["M"] + kinds["T"]),
            deleted=sorted(kinds["D"]),
        )

    def _has_path(self, workdir: Path, commit: str, path: str) -> bool:
        repo = open_repository(workdir)
        tree = tree_of(repo, checked_commit(commit))
        return tree is not None and read_path(repo, tree, path) is not None


# -- the ledger's files, in a working clone ---------------------------------------------


def _identity(line: str) -> str:
    """A ledger or archive line as compared: its JSON, whatever the key order or spacing."""
    try:
        return json.dumps(json.loads(line), sort_keys=True)
    except ValueError:
        return line.strip()


def _append(workdir: Path, relpath: str, lines: list[str]) -> None:
    text = files.read_text(workdir, relpath, LEDGER_CAP_BYTES, follow=False, missing="")
    if text and not text.endswith("\n"):
        text += "\n"
    files.write_text(workdir, relpath, text + "".join(f"{line}\n" for line in lines))


def read_ledger(workdir: Path) -> str | None:
    """The ledger's text in a clone, None when it has none; through no symlink."""
    try:
        return files.read_text(workdir, LEDGER_PATH, LEDGER_CAP_BYTES, follow=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def append_lines(
    workdir: Path, lines: list[LedgerLine], start: int = 0, start_sha256: str | None = None
) -> list[str]:
    """Append the lines the ledger lacks (a retry appends nothing twice). Starting with the
    graph's `start` lines (hashed `start_sha256`), it is made exactly those then `lines`."""
    held = [line for line in (read_ledger(workdir) or "").splitlines() if line.strip()]
    if start_sha256 is not None and ledger_sha256(held[:start]) == start_sha256:
        if held != held[:start] + (texts := [line.to_jsonl() for line in lines]):
            files.write_text(workdir, LEDGER_PATH, "".join(f"{t}\n" for t in held[:start] + texts))
        return [text for i, text in enumerate(texts) if held[start + i : start + i + 1] != [text]]
    seen = {_identity(line) for line in held}
    new: list[str] = []
    for line in lines:
        text = line.to_jsonl()
        if _identity(text) not in seen:
            seen.add(_identity(text))
            new.append(text)
    if new:
        _append(workdir, LEDGER_PATH, new)
    return new


def write_task_file(workdir: Path, relpath: str, text: str) -> bool:
    """Write a task file unless anything is there (the planner's file stays as it was)."""
    return files.create_text(workdir, relpath, text)


def archived(workdir: Path) -> set[str]:
    """Ids of the tasks in the archive."""
    text = files.read_text(workdir, ARCHIVE_PATH, LEDGER_CAP_BYTES, follow=False, missing="")
    ids: set[str] = set()
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("id"), str):
            ids.add(data["id"])
    return ids


def archive_completed(workdir: Path, ledger_text: str) -> list[str]:
    """When docs/tasks/ holds more than ARCHIVE_AFTER task files whose
    latest ledger line is `completed`, move them all into ARCHIVE.jsonl, one line each;
    the ids moved, in ledger order. The tasks' directories (artifact, loop records) stay."""
    latest = latest_lines(ledger_lines(ledger_text))
    done = [
        task_id
        for task_id, line in latest.items()
        if line.status == TaskStatus.COMPLETED
        and files.is_file(workdir, task_file(task_id), follow=False)
    ]
    if len(done) <= ARCHIVE_AFTER:
        return []
    archive = files.read_text(workdir, ARCHIVE_PATH, LEDGER_CAP_BYTES, follow=False, missing="")
    seen = {_identity(line) for line in archive.splitlines()}
    lines: list[str] = []
    for task_id in done:
        path = task_file(task_id)
        text = files.read_text(workdir, path, TASK_FILE_CAP_BYTES, follow=False)
        line = json.dumps(json.loads(text), ensure_ascii=False)
        if _identity(line) not in seen:
            lines.append(line)
        files.unlink(workdir, path)
    _append(workdir, ARCHIVE_PATH, lines)
    return done
