"""The API's side of redaction: what it serves from a run's or a graph's state and events,
and the prose a client hands a workflow, redacted of the secrets the API knows.

A client may paste a secret into a task, a goal or a stop reason. The worker redacts
what it sends the model, what it commits and every answer its workflows give
(`loopworks.worker.redacting`); the API does the same to what it serves, for what reaches
it by other roads (a run's history in git, the start input of a run no worker ever ran)
and for the secrets only the API holds (its tokens). And it redacts the prose a client
writes before any workflow sees it, so that the run's history, its id (made from the
task's first words) and its branch never hold those secrets at all. Rules, commands,
patterns, URLs and prep packages are left as written: redacting a pattern or a command
would change what it does.

The secrets the API knows are its process's (`loopworks.checks.redaction.worker_secrets`):
its settings' secret fields and its tokens file, remembered at start (`remember_secrets`),
and the well-known credential variables of its environment. `loops up` gives the API and
the worker one environment, so the API knows the worker's model key; docker-compose.yml
and the Kubernetes manifests give the model key to workers only, where the API cannot
recognise it: workers' answers are redacted of it at their end, and SECURITY.md says what
is left (docs/api.md#redaction).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar, overload

from loopworks.api.tokens import ApiToken
from loopworks.checks.redaction import redact, redacted, remember, settings_secrets, worker_secrets
from loopworks.schemas.graph import GraphApproval, GraphRequest
from loopworks.schemas.playbook import DeltaBatch
from loopworks.schemas.run import Approval, RunRequest
from loopworks.schemas.settings import Settings
from loopworks.schemas.tasks import Task

Value = TypeVar("Value")


def remember_secrets(settings: Settings, tokens: Iterable[ApiToken]) -> None:
    """Make the API's settings' secrets and every token it accepts (those of its tokens
    file too, which no setting holds) known to redaction in this process: its answers
    and its logs."""
    remember(settings_secrets(settings) | {token.secret for token in tokens})


def served(value: Value) -> Value:
    """`value` (a state, events, a ledger) as the API may serve it."""
    return redacted(value, worker_secrets())


@overload
def prose(text: str) -> str: ...


@overload
def prose(text: None) -> None: ...


def prose(text: str | None) -> str | None:
    """A stop reason or a note, as a workflow is to be given it."""
    return None if text is None else redact(text, worker_secrets())


def run_request(request: RunRequest) -> RunRequest:
    """The request with its task and acceptance criteria redacted."""
    secrets = worker_secrets()
    return request.model_copy(
        update={
            "task": redact(request.task, secrets),
            "acceptance_criteria": [redact(c, secrets) for c in request.acceptance_criteria],
        }
    )


def graph_request(request: GraphRequest) -> GraphRequest:
    """The request with its goal and each given task's title, description and acceptance
    criteria redacted."""
    secrets = worker_secrets()
    tasks = None if request.tasks is None else [_task(task, secrets) for task in request.tasks]
    return request.model_copy(update={"goal": redact(request.goal, secrets), "tasks": tasks})


def approval(approval: Approval) -> Approval:
    """A run's approval with its note redacted (its rules and commands as written)."""
    return approval.model_copy(update={"note": prose(approval.note)})


def delta_batch(batch: DeltaBatch) -> DeltaBatch:
    """A person's playbook batch, every text of it redacted: the writer commits it to the
    repository's `loops/playbook` branch and later runs' prompts quote it."""
    return redacted(batch, worker_secrets())


def graph_approval(approval: GraphApproval) -> GraphApproval:
    """A graph's approval with its note and each edited task's texts redacted."""
    secrets = worker_secrets()
    tasks = None if approval.tasks is None else [_task(task, secrets) for task in approval.tasks]
    return approval.model_copy(update={"note": prose(approval.note), "tasks": tasks})


def _task(task: Task, secrets: frozenset[str]) -> Task:
    return task.model_copy(
        update={
            "title": redact(task.title, secrets),
            "description": redact(task.description, secrets),
            "acceptance_criteria": [redact(c, secrets) for c in task.acceptance_criteria],
        }
    )
