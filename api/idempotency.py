"""`Idempotency-Key` on `POST /runs`: the same key gives back the same run.

The design, and why: the API keeps no database, and several API processes may answer
the same client, so the one atomic "at most once" the service has is Temporal's: a
workflow id is unique within a namespace. A keyed request therefore gets a run id
derived from the key alone, `key-<sha256(task queue, key)[:32]>`, and starts with

- `id_conflict_policy=FAIL` and `id_reuse_policy=REJECT_DUPLICATE`: while the first run
  is open *or after it has closed*, a second start with that id is refused with
  `WorkflowAlreadyStartedError` instead of starting anything. (USE_EXISTING would only
  cover open runs, and ALLOW_DUPLICATE would start a second run once the first closed.)
- a memo holding the SHA-256 of the validated request, so a refused start can tell a
  retry of the same request (200, the same run) from a different request reusing the
  key (422 naming the header, per the IETF idempotency-key draft).

Not the alias-prefixed form (`<alias>-key-<hash>`): the alias comes from the task, so a
reused key with a different task would map to another id and silently start a second
run. The alias stays visible as the run's `LoopAlias` search attribute and in
`RunCreated`. A key is remembered as long as Temporal keeps the run (the namespace's
retention period after it closes). Keys are scoped to the task queue, so deployments
sharing a namespace do not collide; every token holder shares one key space.
"""

from __future__ import annotations

import hashlib

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.api.errors import NotApplicable, invalid
from loopworks.schemas.run import RunRequest
from loopworks.workflows.loop import LOOP_WORKFLOW

KEY_HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 255
REQUEST_DIGEST_MEMO = "loopworks_request_sha256"
RUN_ID_PREFIX = "key-"


def run_id_for_key(key: str, task_queue: str) -> str:
    digest = hashlib.sha256(f"{task_queue}\n{key}".encode()).hexdigest()
    return f"{RUN_ID_PREFIX}{digest[:32]}"


def request_digest(request: RunRequest) -> str:
    """Of the validated request, defaults filled in: `{"task": "t"}` and the same task
    with `"mode": "auto"` spelled out are one request. (`max_iterations` has no such
    default: unset, a prep package may set it, so spelling out 4 is another request.)"""
    return hashlib.sha256(request.model_dump_json().encode()).hexdigest()


async def check_same_request(client: Client, run_id: str, digest: str) -> None:
    """After Temporal refused to start `run_id`: pass when the run there was started by
    this same request, else raise the 4xx that explains."""
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        # Gone between the refused start and now (retention just expired): rare enough
        # that asking the client to retry is right.
        raise NotApplicable(
            f"the run for this {KEY_HEADER} was just removed by Temporal; retry the request"
        ) from err
    if description.workflow_type != LOOP_WORKFLOW:
        raise NotApplicable(f"{KEY_HEADER} maps to {run_id}, which is not a loopworks run")
    recorded = await description.memo_value(REQUEST_DIGEST_MEMO, None)
    if recorded != digest:
        raise invalid(
            KEY_HEADER,
            f"this key was first used with a different request (run {run_id}); "
            "send that request again to get its run, or use a new key for a new run",
            where="header",
        )
