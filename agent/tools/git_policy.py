"""What the model may do with git in the run's repository.

Reading history and changing the working tree and index are the model's; history, refs,
configuration and remotes are loopworks', which commits and publishes the run's work itself.
An allowlist of subcommands, so a git subcommand nobody thought of is refused, not allowed.
"""

from __future__ import annotations

from loopworks.agent.tools.arguments import names, operands
from loopworks.agent.tools.denied import ToolDenied
from loopworks.agent.tools.workspace_paths import into_git, outside

_GIT_READ_AND_WORKTREE = names(
    "status diff log show blame annotate grep ls-files ls-tree rev-parse rev-list describe "
    "shortlog cat-file diff-files diff-index diff-tree check-ignore check-attr whatchanged "
    "name-rev merge-base count-objects version help add rm mv restore apply"
)
_GIT_HISTORY = names(
    "commit reset rebase merge cherry-pick revert tag update-ref reflog filter-branch "
    "filter-repo replace gc prune stash switch worktree submodule notes am init clean "
    "symbolic-ref update-index read-tree commit-tree write-tree pack-refs repack fsck bisect"
)
_GIT_REMOTE = names(
    "push remote fetch pull clone ls-remote send-email request-pull daemon credential "
    "archive bundle"
)
_GIT_BRANCH_CHANGES = names(
    "-d -D -m -M -c -C -f --delete --move --copy --force -u --set-upstream-to "
    "--unset-upstream --edit-description --track"
)


def check_git(args: list[str]) -> None:
    """Raise ToolDenied unless `git ARGS` only reads history or changes the worktree and index."""
    k = 0
    while k < len(args) and args[k].startswith("-"):
        opt = args[k]
        if opt == "-C":
            if k + 1 < len(args) and (outside(args[k + 1]) or into_git(args[k + 1])):
                raise ToolDenied("refusing: git -C outside the workspace")
            k += 2
            continue
        if opt == "-c" or opt.startswith(("--config-env", "-c")):
            raise ToolDenied(
                "refusing: git -c (per-command configuration can run arbitrary programs)"
            )
        if opt.startswith(("--git-dir", "--work-tree", "--exec-path", "--namespace")):
            raise ToolDenied(f"refusing: git {opt} (pointing git at another repository)")
        k += 1
    if k >= len(args):
        return
    sub, rest = args[k], args[k + 1 :]
    if sub == "config":
        raise ToolDenied(
            "refusing: git config (the repository's configuration is not yours to change)"
        )
    if sub in _GIT_REMOTE:
        raise ToolDenied(
            f"refusing: git {sub} (no remote access; loopworks publishes the run's work)"
        )
    if sub in _GIT_HISTORY:
        raise ToolDenied(
            f"refusing: git {sub} (the run's history is recorded by loopworks; edit files "
            "and leave commits to it)"
        )
    if sub == "branch":
        if operands(rest)[1] or _GIT_BRANCH_CHANGES.intersection(rest):
            raise ToolDenied("refusing: git branch changes (only listing branches is allowed)")
        return
    if sub == "checkout":
        if "--" not in rest:
            raise ToolDenied(
                "refusing: git checkout of a branch or commit; `git checkout -- <paths>` "
                "(or git restore) to restore files is allowed"
            )
        return
    if sub == "grep" and any(a.startswith(("-O", "--open-files-in-pager")) for a in rest):
        raise ToolDenied("refusing: git grep -O (runs a program)")
    if sub == "apply" and "--unsafe-paths" in rest:
        raise ToolDenied("refusing: git apply --unsafe-paths (writes outside the worktree)")
    if sub not in _GIT_READ_AND_WORKTREE:
        raise ToolDenied(
            f"refusing: git {sub} is not among the allowed git commands "
            f"({', '.join(sorted(_GIT_READ_AND_WORKTREE))})"
        )
