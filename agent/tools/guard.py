"""The policy every workspace tool call passes before it runs: a call it denies does not run,
and the model reads why (docs/workspace.md#agent-tools).

What holds a command is the sandbox (`checks/sandbox.py`): the workspace is its only writable
path, the workspace's `.git` is read-only, there is no network and no secret in its environment,
and everything it starts is killed with it. The guard keeps only what the sandbox cannot do:

- `ToolGuard.path`: the file tools (read, write, edit, list, search) run in the worker's own
  process, outside the sandbox, so their paths are held here: relative, no `..`, no symlink out
  of the workspace, nothing in `.git`; and `ToolGuard.writable` keeps writes out of the run's
  records (`.loops/`, `schemas.steps.run_owned`), which the worker appends to and commits
  (what a command wrote there is put back after the step, before the worker writes them:
  workspace/graph_records.py), and, in a task graph's loop
  (`graph_task`), out of the graph's ledger and task files, which its orchestrator alone
  writes (`schemas.tasks.orchestrator_owned`). The reads and writes
  themselves go through workspace/files.py, which checks the path again as it opens it, so a
  symlink a command swaps in after the guard looked is refused too.
- `ToolGuard.records_changed`: in a task graph's loop, what a command did to the graph's
  record (the sandbox lets it write the workspace); the command's tool puts it back as the
  task's base has it (workspace/graph_records.py) and tells the model what it undid.
- `ToolGuard.command`: a refusal the model can act on for a command that could only fail in the
  sandbox and would otherwise touch what loopworks owns, git that writes or a path inside
  `.git` (`git_policy`); and a command too long to be one (write a script instead).

Commands that read secrets, leave the workspace, use the network or try to escape are not
refused here: inside the sandbox they fail on their own, and with LOOPS_SANDBOX=off (every
run then carries `commands_unsandboxed`) commands run as the worker's user with nothing but
the scrubbed environment and these refusals in their way. Whatever the mode, the worker's
own git never runs a workspace's hooks or fsmonitor (`workspace/runner.py`). A refusal
raises `ToolDenied`, whose message is shown to the model.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath

from loopworks.agent.tools.denied import ToolDenied
from loopworks.agent.tools.git_policy import check_git
from loopworks.schemas.steps import HISTORY_PATH, run_owned
from loopworks.schemas.tasks import (
    LEDGER_PATH,
    TASKS_DIR,
    orchestrator_owned,
    orchestrator_refusal,
)

__all__ = ["MAX_COMMAND_CHARS", "ToolDenied", "ToolGuard"]

logger = logging.getLogger(__name__)

MAX_COMMAND_CHARS = 64 * 1024
# The run's records in its workspace (history.jsonl, run.json, trajectories): the worker's.
RECORDS_DIR = PurePosixPath(HISTORY_PATH).parts[0]
# The directories that lead to a task graph's record (docs, docs/current), lower case.
_ON_THE_WAY = frozenset(
    "/".join(path.split("/")[:depth])
    for path in (LEDGER_PATH, TASKS_DIR)
    for depth in range(1, path.count("/") + 1)
)

# How a path of a graph's record looked: mode, size, modification and change times, inode.
_Seen = tuple[int, int, int, int, int]


def _has_component(parts: tuple[str, ...], name: str) -> bool:
    """Whether any component is `name`, in any case: case-insensitive filesystems exist."""
    return any(part.lower() == name for part in parts)


class ToolGuard:
    """The policy for one workspace: `path()` for file tools, `command()` for shell commands."""

    def __init__(
        self, workspace: Path, *, graph_task: bool = False, graph_base: str | None = None
    ) -> None:
        self.root = Path(workspace).resolve()
        # A task graph's loop: the graph's ledger and task files are not its to write.
        self.graph_task = graph_task
        # The commit as whose the graph's record is put back after a command changed it:
        # the task's base, else the commit the workspace is at.
        self.graph_base = graph_base or "HEAD"

    def path(self, p: str) -> Path:
        """Resolve a model-supplied relative path to an absolute path inside the workspace.

        Refuses empty paths, NUL bytes, absolute and home-relative paths (even ones that point
        inside), any `..` component, anything whose resolution (following every symlink, the
        last component's and its parents') leaves the workspace, and anything in `.git`.
        """
        if not isinstance(p, str) or not p.strip():
            raise ToolDenied("refusing: empty path; give a path relative to the workspace")
        if "\x00" in p:
            raise ToolDenied("refusing: path contains a NUL byte")
        if p.startswith("/") or os.path.isabs(p):
            raise ToolDenied(
                f"refusing: absolute path {p!r}; give a path relative to the workspace root"
            )
        if p.startswith("~"):
            raise ToolDenied(
                f"refusing: home-relative path {p!r}; give a path relative to the workspace root"
            )
        parts = PurePosixPath(p).parts
        if ".." in parts:
            raise ToolDenied(f"refusing: path {p!r} contains '..'; paths stay inside the workspace")
        if _has_component(parts, ".git"):
            raise ToolDenied(
                f"refusing: {p!r} is inside .git; the run's history is not yours to edit"
            )
        try:
            target = (self.root / p).resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops, names too long
            raise ToolDenied(f"refusing: cannot resolve {p!r}: {exc}") from exc
        if target != self.root and self.root not in target.parents:
            raise ToolDenied(f"refusing: {p!r} resolves outside the workspace (through a symlink)")
        if _has_component(target.relative_to(self.root).parts, ".git"):
            raise ToolDenied(
                f"refusing: {p!r} leads into .git; the run's history is not yours to edit"
            )
        return target

    def writable(self, p: str) -> Path:
        """`path(p)`, for a file tool that writes: not into the run's records either."""
        target = self.path(p)
        parts = target.relative_to(self.root).parts
        relpath = PurePosixPath(*parts).as_posix() if parts else ""
        # The skill generator's helpers and notes live beside the records, and are its work
        # (`run_owned` leaves them out); a command's write there is undone after the step.
        if run_owned(relpath):
            raise ToolDenied(
                f"refusing: {p!r} is in {RECORDS_DIR}/, the run's records, which loopworks "
                "writes and commits itself"
            )
        # Both the path as given and as resolved: a link inside the workspace leads no
        # write into the graph's records either.
        if self.graph_task and (orchestrator_owned(p) or orchestrator_owned(relpath)):
            raise ToolDenied(f"refusing: {orchestrator_refusal([p])}")
        return target

    def graph_records(self) -> dict[str, _Seen]:
        """In a task graph's loop, every path of the graph's record in the workspace (in any
        case of spelling) as `lstat` sees it, to tell what a command changed; else empty."""
        found: dict[str, _Seen] = {}
        if self.graph_task:
            self._scan("", found)
        return found

    def _scan(self, rel: str, found: dict[str, _Seen]) -> None:
        try:
            entries = list(os.scandir(self.root / rel))
        except OSError:
            return
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            owned = orchestrator_owned(child)
            if owned:
                # The change time too: a command can set the others back, never that.
                found[child] = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            if entry.is_dir(follow_symlinks=False) and (owned or child.lower() in _ON_THE_WAY):
                self._scan(child, found)

    def records_changed(self, before: dict[str, _Seen]) -> list[str]:
        """The paths of the graph's record a command changed since `before` (sorted)."""
        after = self.graph_records()
        return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))

    def relative(self, target: Path) -> str:
        """`target` (inside the workspace) as the relative path the model should use."""
        rel = target.relative_to(self.root).as_posix()
        return rel if rel else "."

    def command(self, cmd: str) -> str:
        """Return `cmd` unchanged when the policy allows running it with bash; else ToolDenied."""
        if not isinstance(cmd, str) or not cmd.strip():
            raise ToolDenied("refusing: empty command")
        if "\x00" in cmd:
            raise ToolDenied("refusing: command contains a NUL byte")
        if len(cmd) > MAX_COMMAND_CHARS:
            raise ToolDenied(
                f"refusing: command is {len(cmd)} characters (at most {MAX_COMMAND_CHARS}); "
                "write long scripts to a file with write_file and run the file"
            )
        try:
            check_git(cmd)
        except ToolDenied as exc:
            logger.info("tool command denied: %s", exc)
            raise
        return cmd
