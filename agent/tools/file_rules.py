"""Where a command may write, delete, link or `cd`: inside the workspace and outside `.git`.

The workspace boundary that `ToolGuard.path` draws for the file tools, applied to the operands
and output options of the shell programs that change files. A path is judged as text (absolute,
`~`, `..`, `.git`) and, when it is relative and literal, against the workspace on disk too, so a
symlink the model made cannot carry a write or an `rm -r` outside.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from loopworks.agent.tools.arguments import names, operands, option_values
from loopworks.agent.tools.denied import ToolDenied
from loopworks.agent.tools.shell_words import brace_alternatives
from loopworks.agent.tools.workspace_paths import computed, into_git, outside

REMOVERS = names("rm rmdir unlink shred")

# Commands that change the files they are given: none of them may name a path outside.
_WRITES_EVERY_OPERAND = names("mv tee touch truncate mkdir chmod chown chgrp chattr setfacl")
_WRITES_LAST_OPERAND = names("cp ln install rsync")
# Options whose value is a file or directory the command writes to: (short, long).
_DESTINATION_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "curl": (names("-o"), names("--output --output-dir")),
    "wget": (
        names("-O -P -o -a"),
        names("--output-document --directory-prefix --output-file --append-output"),
    ),
    "tar": (names("-C"), names("--directory")),
    "unzip": (names("-d"), frozenset()),
    "sort": (names("-o"), names("--output")),
    "git": (frozenset(), names("--output")),
    **{name: (names("-t"), names("--target-directory")) for name in ("cp", "mv", "ln", "install")},
}

_FIND_TESTS = names(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -newer "
    "-mtime -mmin -atime -amin -ctime -cmin -size -empty -perm -user -group -links -inum "
    "-samefile -lname -ilname -uid -gid -nouser -nogroup"
)
_FIND_RUNS = ("-exec", "-execdir", "-ok", "-okdir")
_FIND_WRITES = ("-fprint", "-fprint0", "-fprintf", "-fls")


class FileRules:
    """The file-changing rules for one workspace."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def check(self, name: str, args: list[str], run: Callable[[list[str]], object]) -> None:
        """Check program `name` run with `args`; `run` checks a command that find -exec runs."""
        if name in ("cd", "pushd"):
            self._cd(args)
        if name in REMOVERS:
            self._rm(name, args)
        elif name in _WRITES_EVERY_OPERAND:
            for operand in operands(args)[1]:
                self.write_target(operand, name)
        elif name in _WRITES_LAST_OPERAND:
            found = operands(args)[1]
            for operand in found[-1:] if len(found) > 1 else []:
                self.write_target(operand, name)
            if name == "ln":  # a link to outside would let later writes escape
                for operand in found[:-1] if len(found) > 1 else found:
                    if outside(operand) or self._escapes(operand):
                        raise ToolDenied(
                            f"refusing: ln to a path outside the workspace ({operand})"
                        )
        elif name == "sed":
            self._sed(args)
        elif name == "find":
            self._find(args, run)
        if name in _DESTINATION_OPTIONS:
            short, long = _DESTINATION_OPTIONS[name]
            for value in option_values(args, short, long):
                self.write_target(value, f"{name} writing")

    def write_target(self, target: str, what: str) -> None:
        """Refuse `what` (a command, a redirection) writing to `target` outside the workspace."""
        for word in brace_alternatives(target):
            if outside(word):
                raise ToolDenied(
                    f"refusing: {what} outside the workspace ({word}); use paths relative to the "
                    "workspace"
                )
            if self._escapes(word):
                raise ToolDenied(
                    f"refusing: {what} through a symlink leading outside the workspace ({word})"
                )
            if into_git(word):
                raise ToolDenied(
                    f"refusing: {what} into .git ({word}); the run's history is not yours to edit"
                )

    def _escapes(self, word: str, follow_last: bool = True) -> bool:
        """Whether a relative path leads out of the workspace through a symlink already there."""
        if not word or word.startswith("/") or computed(word) or any(c in word for c in "*?["):
            return False  # absolute paths are judged as text; expansions cannot be resolved
        path = self.root / word
        try:
            if follow_last or word.endswith("/"):
                target = path.resolve()
            else:  # the entry itself (rm of a symlink removes the link, not its target)
                target = path.parent.resolve() / path.name
        except (OSError, RuntimeError):
            return True
        return target != self.root and self.root not in target.parents

    def _rm(self, name: str, args: list[str]) -> None:
        options, found = operands(args)
        recursive = any(
            o == "--recursive" or (not o.startswith("--") and ("r" in o or "R" in o))
            for o in options
        )
        shown = f"{name} -r" if recursive else name
        if not found:
            return
        for operand in found:
            for word in brace_alternatives(operand):
                if outside(word):
                    raise ToolDenied(f"refusing: {shown} outside the workspace ({word})")
                if self._escapes(word, follow_last=False):
                    raise ToolDenied(
                        f"refusing: {shown} through a symlink leading outside the workspace "
                        f"({word})"
                    )
                if into_git(word):
                    raise ToolDenied(
                        f"refusing: {shown} of .git ({word}); the run's history is not yours"
                    )
                if not recursive:
                    continue
                bare = re.sub(r"^(?:\./+)+", "", word).rstrip("/")
                if re.fullmatch(r"[.*?/\[\]!^]*", bare):
                    raise ToolDenied(
                        f"refusing: {shown} of {word!r} would delete the whole workspace"
                    )
                if computed(word):
                    raise ToolDenied(
                        f"refusing: {shown} of a computed path ({word}); name the directory "
                        "literally"
                    )

    def _cd(self, args: list[str]) -> None:
        # After a cd outside, every later relative path of the command would land outside too.
        for operand in operands(args)[1][:1]:
            if operand == "-":
                continue
            if outside(operand) or computed(operand) or self._escapes(operand):
                raise ToolDenied(f"refusing: cd outside the workspace ({operand})")
            if into_git(operand):
                raise ToolDenied(f"refusing: cd into .git ({operand})")

    def _sed(self, args: list[str]) -> None:
        if not any(a.startswith("-i") or a.startswith("--in-place") for a in args):
            return
        options, found = operands(args)
        scripted = any(
            o in ("-e", "-f") or o.startswith(("--expression", "--file")) for o in options
        )
        # Without -e/-f the first operand is the script, not a file.
        files = found if scripted else found[1:]
        for operand in files:
            self.write_target(operand, "sed -i")

    def _find(self, args: list[str], run: Callable[[list[str]], object]) -> None:
        k = 0
        while k < len(args) and args[k] in ("-H", "-L", "-P"):
            k += 1
        starts: list[str] = []
        while k < len(args) and not args[k].startswith(("-", "(", "!")):
            starts.append(args[k])
            k += 1
        expression = args[k:]
        if {"-delete", *_FIND_RUNS, *_FIND_WRITES}.intersection(expression):
            for start in starts:
                self.write_target(start, "find -delete/-exec")
        removes = "-delete" in expression or any(
            word in _FIND_RUNS
            and j + 1 < len(expression)
            and os.path.basename(expression[j + 1]) in REMOVERS
            for j, word in enumerate(expression)
        )
        if removes and not _FIND_TESTS.intersection(expression):
            raise ToolDenied(
                "refusing: find deleting without a test (-name, -path, -type, ...) deletes "
                "everything, .git included"
            )
        for j, word in enumerate(expression):
            if word in _FIND_RUNS:
                sub: list[str] = []
                for part in expression[j + 1 :]:
                    if part in (";", "+"):
                        break
                    sub.append(part)
                if sub:
                    run(sub)
            elif word in _FIND_WRITES and j + 1 < len(expression):
                self.write_target(expression[j + 1], f"find {word}")
