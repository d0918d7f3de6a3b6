"""The trajectories of single-shot model calls, kept on the run's origin beside its work.

A structured call (the hydrator, the evaluator, the critics, ...) changes no file of the
run, so it has no commit of the run's to ride in. Its trajectory is a commit of its own,
with no parent and one file, on a ref of its own:
`refs/loopworks/_trajectory/<run id>/_/<name>`. The ref is named by the call (iteration,
step, the role's call count), so a retried call moves its own ref and no two calls touch
the same one: concurrent calls need no lock. `_trajectory` and `_` cannot be run ids or
their segments (those start with a letter or digit), so these refs never collide with a
run's work ref. A busy origin holds tens of thousands of them, so the caches of a remote
origin that steps and the API read from fetch its branches and work refs without them
(workspace/origin.py); reading a run's trajectory fetches that run's call refs alone.
They are kept on origin as the run's work refs are, and expire with them
(docs/operations.md#retention).
"""

from __future__ import annotations

import tempfile
from datetime import datetime

from loopworks.workspace.objects import (
    open_repository,
    read_path,
    tree_of,
    update_refs,
    write_commit,
    write_file_tree,
)
from loopworks.workspace.origin import OriginReader
from loopworks.workspace.refs import calls_prefix
from loopworks.workspace.stores import own_origin_store

# The file a call's commit holds, as the branch holds an agent step's trajectory.
CALL_FILE_DIR = ".loops/trajectory"


class CallRecords(OriginReader):
    def record_call(self, origin: str, run_id: str, name: str, text: str, when: datetime) -> str:
        """Put `text` on origin as the trajectory of call `name` of the run; the commit."""
        ref = f"{calls_prefix(run_id)}{name}"
        path = f"{CALL_FILE_DIR}/{name}.jsonl"
        return self._put_alone(origin, ref, path, text.encode(), f"trajectory · {name}", when)

    def _put_alone(
        self, origin: str, ref: str, path: str, content: bytes, message: str, when: datetime
    ) -> str:
        """Set `ref` on origin to a commit of its own, with no parent and one file (`path`
        holding `content`); the commit."""
        self._check_ref(ref)
        url = self._local_origin(origin)
        author = (self.author_name, self.author_email)
        store = own_origin_store(url)
        if store is not None:
            # The service's own origin: written in place, as a run's commits are.
            repo = open_repository(store.parent)
            tree = write_file_tree(repo, path, content)
            commit = write_commit(repo, tree, [], message, author, when)
            update_refs(repo, {ref: commit})
            return commit
        # Any other origin is pushed to, from a repository holding nothing else.
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.root, prefix=".call-") as scratch:
            self._git(["init", "--quiet", "--bare", scratch])
            repo = open_repository(scratch)
            tree = write_file_tree(repo, path, content)
            commit = write_commit(repo, tree, [], message, author, when)
            push = self._reaching(url, "push", "--quiet", "--force", "--no-verify")
            self._git([f"--git-dir={scratch}", *push, url, f"{commit}:{ref}"])
        return commit

    def call_records(self, origin: str, run_id: str) -> dict[str, str]:
        """Every recorded call of the run (or task graph) on origin: its name and its JSON
        lines."""
        prefix = calls_prefix(run_id)
        found: dict[str, str] = {}
        # A cache fetches this run's call refs only (pruning those gone), no other's.
        only_these = (f"+{prefix}*:{prefix}*",)
        with self._origin_git_dir(origin, commit=None, refspecs=only_these) as git_dir:
            repo = open_repository(git_dir)
            names = sorted(name for name in repo.references if name.startswith(prefix))
            for ref in names:
                name = ref.removeprefix(prefix)
                tree = tree_of(repo, f"{ref}^{{commit}}")
                read = (
                    None if tree is None else read_path(repo, tree, f"{CALL_FILE_DIR}/{name}.jsonl")
                )
                if read is not None and read[0] == "blob":
                    found[name] = read[1].decode("utf-8", errors="replace")
        return found
