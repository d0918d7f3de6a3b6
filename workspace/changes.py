"""What a run's work changed, as a reviewer reads it: a stat line per file for all of it,
and the patch itself up to a size, the files past it listed by path.

Pure functions over `FileDiff`s (`workspace.objects.file_diffs` reads them from git), so
the capping is tested without a repository.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FileDiff:
    """One file's change between two commits: its path (the new one; the old one when
    deleted), its added and deleted line counts, and its unified diff text."""

    path: str
    added: int
    deleted: int
    patch: str
    binary: bool = False


def diff_stat(diffs: Sequence[FileDiff], max_files: int | None = None) -> str:
    """`git diff --stat`'s content: ` path | +added -deleted` for each file (the first
    `max_files` of them, then how many more), then the totals of all. Empty when nothing
    changed."""
    if not diffs:
        return ""
    shown = diffs if max_files is None else diffs[:max_files]
    width = max((len(d.path) for d in shown), default=0)
    lines = [
        f" {d.path.ljust(width)} | " + ("binary" if d.binary else f"+{d.added} -{d.deleted}")
        for d in shown
    ]
    if len(shown) < len(diffs):
        lines.append(f" ... and {len(diffs) - len(shown)} more files")
    added = sum(d.added for d in diffs)
    deleted = sum(d.deleted for d in diffs)
    files = "file" if len(diffs) == 1 else "files"
    lines.append(f" {len(diffs)} {files} changed, {added} insertions(+), {deleted} deletions(-)")
    return "\n".join(lines)


def capped_patch(diffs: Sequence[FileDiff], cap_chars: int) -> str:
    """The files' patches in order while the next one fits in `cap_chars` in all; a file
    whose patch would go past is not cut (half a hunk misleads) but listed by path after
    the patch, so a reader knows what is left to read, and where."""
    shown: list[str] = []
    left: list[str] = []
    used = 0
    for diff in diffs:
        if not left and used + len(diff.patch) <= cap_chars:
            shown.append(diff.patch)
            used += len(diff.patch)
        else:
            left.append(diff.path)
    text = "".join(patch if patch.endswith("\n") else patch + "\n" for patch in shown)
    if left:
        text += f"[patch capped at {cap_chars} characters; not shown, read them yourself:]\n"
        text += "".join(f"{path}\n" for path in left)
    return text
