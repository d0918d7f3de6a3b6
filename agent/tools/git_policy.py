"""The git a command may run in the run's workspace: git that only reads, and no path into .git.

loopworks stages, commits and publishes whatever the agent leaves in the working tree, and the
sandbox binds the workspace's `.git` read-only, so a git command that writes the index, refs,
configuration or remotes can only fail there, with "Read-only file system" (or, as `git stash`
does, with no message at all). Refusing it before it runs tells the model why and what to do
instead. With LOOPS_SANDBOX=off the same refusals are the only thing between a command and the
run's history, and a thin one: a script file or an interpreter can still write there.

Matched on the command's text with its quotes and backslashes removed, so git run through
`bash -c '...'`, `xargs`, a loop or a pipeline is seen too. The price is that a git command only
named in an argument (`grep -r 'git push' docs`) is refused as well; the search tool finds text.
"""

from __future__ import annotations

import re

from loopworks.agent.tools.denied import ToolDenied

# `git` as a program: at the start, after a separator or a space, or at the end of a path.
_GIT = re.compile(r"(?:^|(?<=[\s;&|(){}`!/]))git(?=\s|$)")
# Where the words of one git command end.
_END = re.compile(r"[;&|()`<>\n]")
# A path inside a .git directory: `.git/config`, `sub/.git/hooks`; not `.gitignore`, and not
# a glob like `.git/*`, which `find ... -not -path './.git/*'` uses to leave .git out.
_INSIDE_GIT = re.compile(r"(?<![\w.-])\.git/+[\w-][^\s;&|()`<>]*", re.IGNORECASE)


def _names(text: str) -> frozenset[str]:
    """The space-separated names in text: a table read as prose."""
    return frozenset(text.split())


_READS = _names(
    "status diff log show blame annotate grep ls-files ls-tree rev-parse rev-list describe "
    "shortlog cat-file diff-files diff-index diff-tree check-ignore check-attr whatchanged "
    "name-rev merge-base count-objects show-ref for-each-ref show-branch range-diff var "
    "version help branch apply"
)
_REMOTE = _names(
    "push pull fetch remote clone ls-remote submodule send-email request-pull daemon credential"
)
# Options of the global `git` command that take the next word as their value.
_VALUED = frozenset({"-C", "-c"})
_BRANCH_CHANGES = _names(
    "-d -D -m -M -c -C -f --delete --move --copy --force -u --set-upstream-to "
    "--unset-upstream --edit-description --track"
)
# `git apply` writes the working tree only, unless told to write the index too.
_APPLY_INDEX = frozenset({"--index", "--cached", "-3", "--3way"})

_READ_ONLY = (
    "the workspace's .git is read-only to commands, and loopworks stages and commits whatever "
    "you leave in the working tree; git may only read here (status, diff, log, show, ...). "
    "To get a file back as committed: git show HEAD:PATH > PATH"
)


def check_git(cmd: str) -> None:
    """Raise ToolDenied when `cmd` names a path inside .git or runs git that does not only read."""
    text = re.sub(r"[\"'\\]", "", cmd)
    inside = _INSIDE_GIT.search(text)
    if inside:
        raise ToolDenied(
            f"refusing: {inside.group()} is inside .git, which is loopworks' (read-only to "
            "commands); read history with git log, git show or git status"
        )
    for found in _GIT.finditer(text):
        words = _END.split(text[found.end() :], maxsplit=1)[0].split()
        _check_git_words(words)


def _check_git_words(words: list[str]) -> None:
    k = 0
    while k < len(words) and words[k].startswith("-"):
        k += 2 if words[k] in _VALUED else 1
    if k >= len(words):
        return  # `git`, `git --version`
    sub, rest = words[k], words[k + 1 :]
    if sub == "config":
        raise ToolDenied("refusing: git config (the repository's configuration is loopworks')")
    if sub in _REMOTE:
        raise ToolDenied(
            f"refusing: git {sub} (no remotes and no network; loopworks publishes the run's work)"
        )
    operands = [w for w in rest if not w.startswith("-")]
    if sub == "branch" and (operands or _BRANCH_CHANGES.intersection(rest)):
        raise ToolDenied(f"refusing: git branch changes (only listing branches): {_READ_ONLY}")
    if sub == "apply" and _APPLY_INDEX.intersection(rest):
        raise ToolDenied(f"refusing: git apply to the index: {_READ_ONLY}")
    if sub not in _READS:
        raise ToolDenied(f"refusing: git {sub}: {_READ_ONLY}")
