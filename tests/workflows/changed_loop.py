"""The loop with one change made to its workflow code, as a change to workflows/ would be:
what the replay tests replay recorded histories against (docs/operations.md, "Upgrading
with runs in flight").

Unsandboxed: Temporal's sandbox would import the test modules anew inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import workflow

from loopworks.schemas.loop import LoopInput, LoopResult
from loopworks.workflows.loop import LoopWorkflow

Change = Callable[["ChangedLoop"], None]

# A change's id, as it would be asked with `workflow.patched`.
PATCH_ID = "prepare-workspace-remotely"


@workflow.defn(name="LoopWorkflow", sandboxed=False)
class ChangedLoop(LoopWorkflow):
    """LoopWorkflow with `change` applied to each new instance (set it per test)."""

    change: Change = staticmethod(lambda loop: None)

    @workflow.init
    def __init__(self, params: LoopInput) -> None:
        super().__init__(params)
        type(self).change(self)

    @workflow.run
    async def run(self, params: LoopInput) -> LoopResult:
        return await super().run(params)


def unchanged(loop: ChangedLoop) -> None:
    """No change: the subclass alone replays (what the changes are measured against)."""


def prepares_workspace_remotely(loop: ChangedLoop) -> None:
    """Preparing the workspace as an activity instead of a local one: another command."""
    _prepare_remotely_if(loop, lambda: True)


def learns_after_close(loop: ChangedLoop) -> None:
    """The same steps in another order: the playbook's curation after the push."""
    learn, close = loop._do.learning.learn, loop._do.close

    async def not_yet(reflected: Any, no_skills: str | None = None) -> None:
        return None

    async def close_then_learn(reflected: Any) -> None:
        await close(reflected)
        await learn(reflected)

    loop._do.learning.learn = not_yet  # type: ignore[method-assign]
    loop._do.close = close_then_learn  # type: ignore[method-assign]


# The three stages of one change made safely, the plain Temporal way.


def patched(loop: ChangedLoop) -> None:
    """Stage 1: the new path only for runs that did not start on the old one."""
    _prepare_remotely_if(loop, lambda: workflow.patched(PATCH_ID))


def deprecated(loop: ChangedLoop) -> None:
    """Stage 2, once no run from before the change is open: the new path only, still
    recording (and, replayed, accepting) the change's marker."""

    def always() -> bool:
        workflow.deprecate_patch(PATCH_ID)
        return True

    _prepare_remotely_if(loop, always)


def removed(loop: ChangedLoop) -> None:
    """Stage 3, once no run from stage 1 is open: the new path, no call left."""
    prepares_workspace_remotely(loop)


def _prepare_remotely_if(loop: ChangedLoop, new_path: Callable[[], bool]) -> None:
    activity = loop._steps.activity

    def maybe_remote(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("local") and new_path():
            kwargs["local"] = False
        return activity(*args, **kwargs)

    loop._steps.activity = maybe_remote  # type: ignore[method-assign]
