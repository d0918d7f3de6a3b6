"""The PreToolUse policy every workspace tool call passes (seed 003's `permissionDecision: deny`).

`ToolGuard.path` keeps file tools inside the run's workspace; `ToolGuard.command` refuses
destructive, escaping and secret-reading shell commands; `tool_env` is the only environment a
command ever sees. A refusal raises `ToolDenied`, whose message is shown to the model.

This is a policy filter, not a sandbox: an allowed interpreter (`python3 -c ...`) can still do
anything the worker's user can. It stops the obvious and the accidental; the scrubbed
environment is what keeps secrets out of reach of everything a command starts.

The entry point only: the command rules are `command_policy` (with `shell_words`, the
tokenizer, and the rule modules it uses); `ToolDenied`, `tool_env` and `secret_name` are
re-exported from where they live.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath

from loopworks.agent.tools.command_policy import CommandPolicy
from loopworks.agent.tools.denied import ToolDenied
from loopworks.agent.tools.environment import secret_name, tool_env
from loopworks.agent.tools.workspace_paths import has_git_component

__all__ = ["MAX_COMMAND_CHARS", "ToolDenied", "ToolGuard", "secret_name", "tool_env"]

logger = logging.getLogger(__name__)

MAX_COMMAND_CHARS = 64 * 1024


class ToolGuard:
    """The policy for one workspace: `path()` for file tools, `command()` for shell commands."""

    def __init__(self, workspace: Path) -> None:
        self.root = Path(workspace).resolve()

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
        if has_git_component(parts):
            raise ToolDenied(
                f"refusing: {p!r} is inside .git; the run's history is not yours to edit"
            )
        try:
            target = (self.root / p).resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops, names too long
            raise ToolDenied(f"refusing: cannot resolve {p!r}: {exc}") from exc
        if target != self.root and self.root not in target.parents:
            raise ToolDenied(f"refusing: {p!r} resolves outside the workspace (through a symlink)")
        if has_git_component(target.relative_to(self.root).parts):
            raise ToolDenied(
                f"refusing: {p!r} leads into .git; the run's history is not yours to edit"
            )
        return target

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
            CommandPolicy(self.root).check(cmd, 0)
        except ToolDenied as exc:
            logger.info("tool command denied: %s", exc)
            raise
        return cmd
