"""Starting a run: the checks pydantic cannot make, the run id, and the workflow start."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api import admission, idempotency, quotas
from loopworks.api.errors import QuotaExceeded, invalid
from loopworks.prompts.catalog import template_ids
from loopworks.schemas.git_names import is_url
from loopworks.schemas.loop import LoopInput
from loopworks.schemas.notify import NOTIFY_SECRET, NotifyRequest
from loopworks.schemas.origin_rules import OriginRules
from loopworks.schemas.run import RunRequest
from loopworks.schemas.settings import Settings
from loopworks.workflows.decisions import alias_for
from loopworks.workflows.loop import LoopWorkflow
from loopworks.workflows.search_attributes import LOOP_STARTED_BY
from loopworks.workspace.objects import open_repository, ref_target
from loopworks.workspace.origin_access import refusal, verdict_for, webhook_verdict
from loopworks.workspace.refs import redact
from loopworks.workspace.runner import GitError

SUMMARY_CHARS = 200


def new_run_id(alias: str, now: datetime) -> str:
    """`<alias>-<yyyyMMdd-HHmmss>-<6 hex>`: sortable by eye, unique without coordination."""
    return f"{alias}-{now.astimezone(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def checked(request: RunRequest, rules: OriginRules) -> RunRequest:
    """Reject what would only fail later inside the run, or what the deployment does not
    allow; return the request to start. Blocking (a host may be resolved): call it from a
    thread.

    A local repo must be given as an absolute path (`~` counts): a relative one would be
    resolved in the API's working directory, which the client cannot know (found by
    hand: `loops new --repo .` ran on the API's directory, not the caller's).
    """
    if request.template is not None and request.template not in template_ids():
        valid = ", ".join(sorted(template_ids()))
        message = f"unknown template {request.template!r}; valid ids: {valid}"
        raise invalid("template", message, request.template)
    if request.repo:
        repo = checked_repo(request.repo, rules)
        checked_branch(repo, request.base_branch)
        request = request.model_copy(update={"repo": repo})
    checked_notify(request.notify, rules)
    return request


def checked_notify(notify: NotifyRequest | None, rules: OriginRules) -> None:
    """A 422 for a webhook the deployment's origin rules do not admit (as they would not
    a repository there), naming the setting that would. Blocking: a host may be resolved."""
    for n, webhook in enumerate(notify.webhooks if notify else []):
        verdict = webhook_verdict(webhook.url, rules)
        if not verdict:
            message = f"webhook not allowed: {refusal(verdict)}"
            raise invalid(f"notify.webhooks.{n}.url", message, redact(webhook.url))


def notify_configured(notify: NotifyRequest | None, settings: Settings) -> None:
    """A request asking for notifications where none can be signed is a 422."""
    if notify is not None and not settings.notify_secret:
        message = f"this deployment sends no notifications: {NOTIFY_SECRET} is not set"
        raise invalid("notify", message)


def within_limits(request: RunRequest, settings: Settings) -> RunRequest:
    """The request with the operator's budget applied, or a 422 naming the setting it
    goes past (rules per request, the budget)."""
    quotas.check_rules(len(request.rules), settings)
    notify_configured(request.notify, settings)
    budget = quotas.checked_budget(request.budget, settings)
    return request.model_copy(update={"budget": budget})


def started_by(name: str) -> TypedSearchAttributes:
    """The search attribute that says who started a run or a graph, set at its start."""
    return TypedSearchAttributes([SearchAttributePair(LOOP_STARTED_BY, name)])


def checked_repo(repo: str, rules: OriginRules, where: str = "body") -> str:
    """A URL as given; a local repository made absolute, or a 422 naming what is wrong
    (and where: the body's `repo`, or a query parameter's). An origin the deployment does
    not allow (schemes/origin_policy.py) is refused first, before anything is looked at,
    saying which setting would admit it."""
    if not is_url(repo):
        try:
            path = Path(repo).expanduser()
        except RuntimeError:
            # `~name/...` for a user this machine does not have (found by the API fuzz test).
            message = f"no such user's home directory: {repo}"
            raise invalid("repo", message, repo, where) from None
        if not path.is_absolute():
            message = (
                f"a local repository must be an absolute path, not {repo!r}: a relative one "
                "would be found from the API's working directory, not yours"
            )
            raise invalid("repo", message, repo, where)
    verdict = verdict_for(repo, rules)
    if not verdict:
        raise invalid("repo", f"origin not allowed: {refusal(verdict)}", redact(repo), where)
    if is_url(repo):
        return repo
    if not path.is_dir():
        raise invalid("repo", f"no such directory: {repo}", repo, where)
    if not ((path / ".git").exists() or (path / "HEAD").is_file()):
        raise invalid("repo", f"not a git repository: {repo}", repo, where)
    return str(path.resolve())


def checked_branch(repo: str, base_branch: str | None) -> None:
    """A base branch a local repository lacks is a 422 now, not a run that fails after its
    git step's retries. A URL's branches are the worker's to ask: the API may not reach
    it, and asking would cost a round trip."""
    if base_branch is None or is_url(repo):
        return
    branch = base_branch.removeprefix("refs/heads/")
    try:
        found = ref_target(open_repository(repo), f"refs/heads/{branch}")
    except GitError:
        return  # checked_repo let it through: the run says what git says of it
    if found is None:
        raise invalid("base_branch", f"branch {branch!r} does not exist in {repo}", base_branch)


def summary(task: str) -> str:
    # The UI shows the summary on one line.
    line = " ".join(task.split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def _details(request: RunRequest, run_id: str) -> str:
    return "\n".join(
        [
            f"loopworks reflex loop `{run_id}`",
            f"- template: {request.template or 'chosen by hydration'}",
            f"- max iterations: {request.max_iterations or 'the default'}, "
            f"mode: {request.mode.value}",
            f"- repo: {request.repo or 'the service origin'}",
            f"- branch: loops/{run_id}",
        ]
    )


@dataclass(frozen=True)
class Started:
    run_id: str
    alias: str
    # False when an Idempotency-Key gave back a run an earlier request started.
    created: bool


async def start_run(
    client: Client,
    settings: Settings,
    request: RunRequest,
    idempotency_key: str | None = None,
    *,
    caller: str,
) -> Started:
    """Start a run for `caller` (a token's name) in a slot of each cap, with at most what
    its client's day leaves (`loopworks.api.admission`); with a key, start it at most once
    (`loopworks.api.idempotency`)."""
    now = datetime.now(UTC)
    alias = alias_for(request.task)
    if idempotency_key is None:
        run_id = new_run_id(alias, now)
        digest = None
    else:
        run_id = idempotency.run_id_for_key(idempotency_key, settings.task_queue)
        digest = idempotency.request_digest(request)
    try:
        async with admission.admitted(
            client, settings, quotas.Kind.RUNS, caller, run_id, request.budget
        ) as admitted:
            request = request.model_copy(update={"budget": admitted.budget})
            params = LoopInput(
                run_id=run_id,
                alias=alias,
                request=request,
                created_at=now.isoformat(),
                started_by=caller,
                notify=settings.notify_plan(request.notify),
                slots=admitted.slot_ids,
            )
            memo = admitted.memo()
            if digest is not None:
                memo[idempotency.REQUEST_DIGEST_MEMO] = digest
            await client.start_workflow(
                LoopWorkflow.run,
                params,
                id=run_id,
                task_queue=settings.task_queue,
                static_summary=summary(request.task),
                static_details=_details(request, run_id),
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                # Never reused, not even after its run closed: a keyed id stands for its
                # request, and admission burns the id of a run admitted but never started.
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                memo=memo,
                search_attributes=started_by(caller),
            )
    except (QuotaExceeded, WorkflowAlreadyStartedError) as err:
        # A retried keyed request gets the run it started, even at the cap it reached.
        if digest is None:
            raise
        if isinstance(err, QuotaExceeded) and not await _exists(client, run_id):
            raise
        await idempotency.check_same_request(client, run_id, digest)
        return Started(run_id, alias, created=False)
    return Started(run_id, alias, created=True)


async def _exists(client: Client, run_id: str) -> bool:
    try:
        await client.get_workflow_handle(run_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True
