"""Finding: admission could be raced. With LOOPS_MAX_RUNS_PER_CLIENT=5 and LOOPS_MAX_RUNS=8,
50 `POST /runs` sent at once were answered 201 thirteen times: the API counted through
visibility and then started, and visibility lags a start. Nothing bounded a client's spend
over a day either.

Now a run starts only in a slot of each cap, claimed through Temporal's one open workflow
per id (api/admission.py), given back as the run closes, freed when its holder is gone;
and a client's day of spending bounds each new budget (api/spend.py). Against the dev
server and real API processes over HTTP."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from loopworks.api import admission, quotas
from loopworks.api.errors import QuotaExceeded
from loopworks.schemas.settings import Settings
from loopworks.service.connect import CONVERTER
from loopworks.workflows.search_attributes import LOOP_STARTED_BY
from tests.integration.stack import Stack, bare_remote

pytestmark = pytest.mark.integration

ALICE, BOB = "alice-0123456789abcdef", "bob-0123456789abcdef0"
TOKENS = f"alice:{ALICE},bob:{BOB}"


def _post(base: str, token: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{base}/runs", json=body, headers=headers, timeout=120)


def _all_at_once(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


async def _client(stack: Stack) -> Client:
    return await Client.connect(
        stack.server.address, namespace=stack.namespace, data_converter=CONVERTER
    )


async def _open(client: Client, stack: Stack, workflow_type: str) -> list[str]:
    query = (
        f'TaskQueue = "{stack.task_queue}" AND WorkflowType = "{workflow_type}"'
        ' AND ExecutionStatus = "Running"'
    )
    return [execution.id async for execution in client.list_workflows(query)]


async def _settled(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """`check()` once it is truthy: visibility catches up within seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found or time.monotonic() > deadline:
            assert found, f"{what} never happened"
            return found
        await asyncio.sleep(0.3)


async def test_fifty_concurrent_starts_on_two_api_processes_admit_at_most_the_caps(
    stack: Stack,
) -> None:
    caps = {"LOOPS_MAX_RUNS_PER_CLIENT": "5", "LOOPS_MAX_RUNS": "8", "LOOPS_API_TOKENS": TOKENS}
    _, one = stack.start_api(**caps)
    _, two = stack.start_api(**caps)
    # Two clients, each on both processes, all 50 requests in flight together.
    senders = [(one, ALICE), (two, BOB), (two, ALICE), (one, BOB)]
    answers = _all_at_once(
        [partial(_post, *senders[n % 4], {"task": f"task {n}"}) for n in range(50)]
    )

    created = [answer for answer in answers if answer.status_code == 201]
    refused = [answer for answer in answers if answer.status_code == 429]
    assert len(created) + len(refused) == 50, [a.text for a in answers if a not in created]
    assert 5 <= len(created) <= 8, len(created)
    for answer in refused:
        body = answer.json()
        assert body["limit"] in ("LOOPS_MAX_RUNS", "LOOPS_MAX_RUNS_PER_CLIENT"), body
        assert body["limit"] in body["detail"] and body["left"] == 0
        assert int(answer.headers["retry-after"]) > 0

    client = await _client(stack)
    run_ids = sorted(answer.json()["run_id"] for answer in created)
    # Each admitted run exists, and no other: a refused request started nothing ...
    await _settled(
        lambda: _equal(_open(client, stack, "LoopWorkflow"), run_ids), "every admitted run"
    )
    # ... held two slots, one of its client's and one of the service's, while every slot a
    # refused request claimed on the way went back.
    slots = await _settled(
        lambda: _length(_open(client, stack, "SlotWorkflow"), 2 * len(run_ids)), "the slots"
    )
    assert sum("/runs/all/" in slot for slot in slots) == len(run_ids)
    assert sum("/runs/client/alice/" in slot for slot in slots) <= 5
    assert sum("/runs/client/bob/" in slot for slot in slots) <= 5
    per_client = Counter(
        [
            (await client.get_workflow_handle(run_id).describe()).typed_search_attributes.get(
                LOOP_STARTED_BY
            )
            for run_id in run_ids
        ]
    )
    assert max(per_client.values()) <= 5, per_client


async def _equal(found: Any, expected: list[str]) -> bool:
    return sorted(await found) == expected


async def _length(found: Any, count: int) -> list[str] | None:
    listed: list[str] = await found
    return listed if len(listed) == count else None


async def test_twenty_concurrent_graphs_admit_at_most_the_graph_caps(stack: Stack) -> None:
    _, one = stack.start_api(LOOPS_MAX_GRAPHS_PER_CLIENT="2", LOOPS_MAX_GRAPHS="3")
    _, two = stack.start_api(LOOPS_MAX_GRAPHS_PER_CLIENT="2", LOOPS_MAX_GRAPHS="3")
    answers = _all_at_once(
        [
            partial(httpx.post, f"{base}/graphs", json={"goal": "notes"}, timeout=120)
            for base in [one, two] * 10
        ]
    )
    created = [answer for answer in answers if answer.status_code == 201]
    assert 1 <= len(created) <= 2, [answer.text for answer in answers]
    assert all(answer.status_code in (201, 429) for answer in answers)


async def test_a_slot_comes_back_when_its_run_closes(stack: Stack, tmp_path: Path) -> None:
    remote = bare_remote(tmp_path)
    stack.start_worker()
    _, base = stack.start_api(LOOPS_MAX_RUNS_PER_CLIENT="1", LOOPS_MAX_RUNS="0")
    body = {"task": "Write a haiku", "repo": str(remote), "audit_probability": 0}
    with httpx.Client(base_url=base, timeout=60) as http:
        first = http.post("/runs", json={**body, "mode": "interactive"})
        assert first.status_code == 201, first.text
        run_id = first.json()["run_id"]
        over = http.post("/runs", json=body)
        assert over.status_code == 429, over.text
        assert over.json()["limit"] == "LOOPS_MAX_RUNS_PER_CLIENT"

        assert http.post(f"/runs/{run_id}/stop", json={"reason": "enough"}).status_code == 202
        client = await _client(stack)
        await client.get_workflow_handle(run_id).result()
        # The run gave its slot back itself: the slot workflow completed, nobody freed it.
        slot = await _settled(lambda: _length(_slots(client, stack, run_id), 1), "the slot")
        described = await client.get_workflow_handle(slot[0]).describe()
        assert described.status == WorkflowExecutionStatus.COMPLETED
        again = http.post("/runs", json=body)
        assert again.status_code == 201, again.text


async def _slots(client: Client, stack: Stack, holder: str) -> list[str]:
    query = f'TaskQueue = "{stack.task_queue}" AND WorkflowType = "SlotWorkflow"'
    found = []
    async for execution in client.list_workflows(query):
        if await execution.memo_value("loopworks_slot_holder", None) == holder:
            found.append(execution.id)
    return found


async def test_a_run_terminated_from_outside_leaves_no_slot_held(stack: Stack) -> None:
    """Terminated, a run cannot give its slot back: the next claim frees it."""
    _, base = stack.start_api(LOOPS_MAX_RUNS_PER_CLIENT="1", LOOPS_MAX_RUNS="1")
    with httpx.Client(base_url=base, timeout=60) as http:
        first = http.post("/runs", json={"task": "t"})
        assert first.status_code == 201, first.text
        assert http.post("/runs", json={"task": "t"}).status_code == 429
        client = await _client(stack)
        await client.get_workflow_handle(first.json()["run_id"]).terminate(reason="by hand")
        # Visibility may still count it open for a moment: only that refuses meanwhile.
        deadline = time.monotonic() + 30
        while (again := http.post("/runs", json={"task": "t"})).status_code == 429:
            assert "in progress" in again.json()["detail"] and time.monotonic() < deadline
            time.sleep(0.5)
        assert again.status_code == 201, again.text


async def test_a_claim_whose_api_process_died_is_freed_and_its_run_never_starts(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API process claims a slot for run `died`, then dies before starting it. A later
    claim frees the slot once START_GRACE has passed, after burning `died`'s id: were the
    dead process's start still on its way, Temporal would refuse it."""
    client = await _client(stack)
    settings = Settings(
        LOOPS_TASK_QUEUE=stack.task_queue, LOOPS_MAX_RUNS_PER_CLIENT="1", LOOPS_MAX_RUNS="0"
    )
    died = f"died-{stack.task_queue}"
    async with admission.admitted(client, settings, quotas.Kind.RUNS, "alice", died, None):
        pass  # the process dies here, before it starts `died`

    # Within the grace its start may still come: the slot is held.
    with pytest.raises(QuotaExceeded):
        async with admission.admitted(client, settings, quotas.Kind.RUNS, "alice", "n-1", None):
            pass

    monkeypatch.setattr(admission, "START_GRACE", timedelta(0))
    async with admission.admitted(
        client, settings, quotas.Kind.RUNS, "alice", "n-2", None
    ) as admitted:
        assert len(admitted.slots) == 1
    with pytest.raises(WorkflowAlreadyStartedError):
        await client.start_workflow(
            "LoopWorkflow",
            id=died,
            task_queue=stack.task_queue,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )


# --- a client's day ------------------------------------------------------------------------


async def _reserved_usd(client: Client, run_id: str) -> float:
    described = await client.get_workflow_handle(run_id).describe()
    reserved = await described.memo_value("loopworks_reserved")
    return float(reserved["max_cost_usd"])


async def test_a_clients_day_bounds_its_budgets_and_then_refuses(stack: Stack) -> None:
    _, base = stack.start_api(
        LOOPS_API_TOKENS=TOKENS, LOOPS_CLIENT_DAY_USD="1", LOOPS_RUN_BUDGET_USD="0.6"
    )
    client = await _client(stack)
    first = _post(base, ALICE, {"task": "one"})
    second = _post(base, ALICE, {"task": "two"})
    third = _post(base, ALICE, {"task": "three"})
    assert (first.status_code, second.status_code) == (201, 201), second.text
    assert await _reserved_usd(client, first.json()["run_id"]) == 0.6
    # The day's limit joins the run's: what is left of it, not the run budget.
    assert await _reserved_usd(client, second.json()["run_id"]) == pytest.approx(0.4)
    assert third.status_code == 429, third.text
    body = third.json()
    assert body["limit"] == "LOOPS_CLIENT_DAY_USD" and body["left"] == pytest.approx(0)
    assert "$0.00 of LOOPS_CLIENT_DAY_USD ($1.00) left" in body["detail"]
    assert 86_000 < int(third.headers["retry-after"]) <= 86_400
    # Another client's day is its own.
    assert _post(base, BOB, {"task": "bob's"}).status_code == 201


async def test_racing_starts_of_one_client_share_one_day(stack: Stack) -> None:
    _, one = stack.start_api(
        LOOPS_API_TOKENS=TOKENS,
        LOOPS_CLIENT_DAY_USD="1",
        LOOPS_RUN_BUDGET_USD="0.3",
        LOOPS_MAX_RUNS_PER_CLIENT="20",
    )
    _, two = stack.start_api(
        LOOPS_API_TOKENS=TOKENS,
        LOOPS_CLIENT_DAY_USD="1",
        LOOPS_RUN_BUDGET_USD="0.3",
        LOOPS_MAX_RUNS_PER_CLIENT="20",
    )
    answers = _all_at_once(
        [
            partial(_post, base, ALICE, {"task": f"task {n}"})
            for n, base in enumerate([one, two] * 6)
        ]
    )
    assert all(answer.status_code in (201, 429) for answer in answers)
    client = await _client(stack)
    given = [
        await _reserved_usd(client, answer.json()["run_id"])
        for answer in answers
        if answer.status_code == 201
    ]
    assert given and sum(given) <= 1.0 + 1e-6, given


async def test_a_closed_run_counts_what_it_spent_not_its_budget(
    stack: Stack, tmp_path: Path
) -> None:
    remote = bare_remote(tmp_path)
    stack.start_worker()
    _, base = stack.start_api(LOOPS_CLIENT_DAY_USD="1", LOOPS_RUN_BUDGET_USD="1")
    body = {"task": "Write a haiku", "repo": str(remote), "audit_probability": 0}
    with httpx.Client(base_url=base, timeout=60) as http:
        first = http.post("/runs", json=body)
        assert first.status_code == 201, first.text
        # Open, it holds the whole day.
        over = http.post("/runs", json=body)
        assert over.status_code == 429 and over.json()["limit"] == "LOOPS_CLIENT_DAY_USD"
        client = await _client(stack)
        result = await client.get_workflow_handle(first.json()["run_id"]).result()
        spent = result["state"]["usage"]["cost_usd"]
        assert 0 < spent < 0.5  # the offline model's calls, priced as the model's
        deadline = time.monotonic() + 30
        while (again := http.post("/runs", json=body)).status_code == 429:
            assert time.monotonic() < deadline, again.text
            time.sleep(0.5)
        assert again.status_code == 201, again.text
        # What is left is the day less what the closed run spent, not less its budget.
        assert await _reserved_usd(client, again.json()["run_id"]) == pytest.approx(1 - spent)
