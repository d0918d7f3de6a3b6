"""How a step's failures reach its workflow: one no retry can help as a non-retryable
ApplicationError saying why, at once; a workspace lost under a step as one to retry."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from temporalio.exceptions import ApplicationError

from loopworks.llm.base import InvalidOutput
from loopworks.llm.budget import BudgetSpent, Meter
from loopworks.schemas.steps import (
    BUDGET_EXHAUSTED,
    INVALID_OUTPUT,
    ORIGIN_LACKS,
    ORIGIN_REFUSED,
    UNSAFE_PATH,
)
from loopworks.workspace.files import UnsafePath
from loopworks.workspace.origin_access import OriginRefusedError
from loopworks.workspace.runner import OriginLacksError

WORKSPACE_LOST = "WorkspaceLost"


@contextlib.contextmanager
def final_when_invalid_output(meter: Meter | None = None) -> Iterator[None]:
    """A model's answer still invalid after its repair leaves the step as a non-retryable
    error: the workflow retries the step once, and the repair was that retry. It carries
    what the step's requests spent (`meter`, priced), so the run counts it."""
    try:
        yield
    except InvalidOutput as exc:
        spent = [] if meter is None else [meter.used.model_dump(mode="json")]
        raise ApplicationError(str(exc), *spent, type=INVALID_OUTPUT, non_retryable=True) from exc


def budget_exhausted(spent: BudgetSpent) -> ApplicationError:
    """A step's call refused, or cut, for its budget (docs/loop.md#budgets): final, and
    carrying what the call had spent (priced) so the run counts it."""
    usage = spent.usage.model_dump(mode="json")
    return ApplicationError(spent.reason, usage, type=BUDGET_EXHAUSTED, non_retryable=True)


def still_a_clone(workdir: Path) -> None:
    """The data directory is a cache the worker may lose at any moment
    (docs/architecture.md#where-state-lives): when the clone vanished while the agent worked
    in it, the step failed for that, not for the model's answer (a deliverable "not written"
    included). A plain ApplicationError is retried, from the same commit, in a fresh clone
    on whichever worker takes it."""
    if not (workdir / ".git").is_dir():
        raise ApplicationError(
            f"the workspace {workdir.name} was removed while the agent worked in it",
            type=WORKSPACE_LOST,
        )


@contextlib.contextmanager
def failing_at_once_when_origin_lacks() -> Iterator[None]:
    """An origin that answered without the branch or commit a run starts from will not
    have it on the next attempt either, nor will an origin the deployment refuses become
    allowed: fail the step now, saying so, rather than retry for the policy's schedule."""
    try:
        yield
    except OriginLacksError as err:
        raise ApplicationError(str(err), type=ORIGIN_LACKS, non_retryable=True) from err
    except OriginRefusedError as err:
        # The deployment does not allow the origin (a workflow started around the API, by
        # the temporal CLI, is checked here too): no retry changes the settings.
        raise ApplicationError(str(err), type=ORIGIN_REFUSED, non_retryable=True) from err


@contextlib.contextmanager
def refusing_unsafe_paths() -> Iterator[None]:
    """A path in the workspace the worker will not read or write (workspace/files.py) fails
    the step at once, saying which and why: the same tree would be refused again."""
    try:
        yield
    except UnsafePath as err:
        raise ApplicationError(str(err), type=UNSAFE_PATH, non_retryable=True) from err
