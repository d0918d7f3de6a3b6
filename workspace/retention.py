"""Which of the worker's clones to remove: a pure decision over what is on disk.

A worker's data directory is a cache: any clone may go, and the step that next needs it
clones again (`GitWorkspaces.checkout`). So retention asks nothing of Temporal about which
runs have finished: a clone no step has used for `keep_seconds` is of a finished run (or
of one idle so long that cloning again costs nothing that matters), and beyond a total of
`max_bytes` the longest idle go first. A clone used within `IN_USE_SECONDS` is never
removed, whatever the total: its run is in a step, and removing it would fail that step.
workspace/sweep.py measures the disk and removes what this decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Longer than any step holds a clone (an agent step's hour, workflows/policies.py): a
# clone used within this is a run's in a step, or between two.
IN_USE_SECONDS = 2 * 3600.0


@dataclass(frozen=True)
class Clone:
    """One removable entry under the workspaces root: a run's clone (a task graph's
    clones all under its id), an evaluation slot, a merge queue's or playbook's clone,
    an origin's bare cache."""

    name: str
    idle_seconds: float  # since a step last used it
    bytes: int = 0  # measured only when there is a total to keep under


@dataclass(frozen=True)
class RetentionPolicy:
    keep_seconds: float  # LOOPS_KEEP_CLONES_HOURS
    max_bytes: int | None = None  # LOOPS_CLONES_MAX_BYTES; None: no total

    @property
    def measures(self) -> bool:
        return self.max_bytes is not None


@dataclass(frozen=True)
class Decision:
    remove: list[str]  # names, longest idle first
    kept_bytes: int  # what stays, when measured
    over_by: int  # bytes still over max_bytes: all of it in use


def to_remove(clones: Sequence[Clone], policy: RetentionPolicy) -> Decision:
    """The clones idle past the policy's age, then, longest idle first, those needed to
    bring the total under its cap; never one in use."""
    keep_for = max(policy.keep_seconds, IN_USE_SECONDS)
    by_idle = sorted(clones, key=lambda clone: (-clone.idle_seconds, clone.name))
    remove = [clone for clone in by_idle if clone.idle_seconds >= keep_for]
    kept = [clone for clone in by_idle if clone.idle_seconds < keep_for]
    total = sum(clone.bytes for clone in kept)
    if policy.max_bytes is not None:
        for clone in list(kept):
            if total <= policy.max_bytes or clone.idle_seconds < IN_USE_SECONDS:
                break  # sorted longest idle first: every one after is in use too
            remove.append(clone)
            kept.remove(clone)
            total -= clone.bytes
    over_by = 0 if policy.max_bytes is None else max(0, total - policy.max_bytes)
    return Decision(remove=[clone.name for clone in remove], kept_bytes=total, over_by=over_by)
