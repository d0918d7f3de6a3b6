"""A worker's death must not make a live run unreadable: kill -9 the only worker of a
blocked run, start another, and the run's events answer again within seconds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.stack import Process, Stack
from tests.integration.test_temporal_cli import start_run, wait_for

pytestmark = pytest.mark.integration

READABLE_WITHIN_S = 3.0


def wait_until_polling(worker: Process, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while "worker polling" not in worker.output():
        assert time.monotonic() < deadline, worker.output()
        time.sleep(0.05)


def test_a_blocked_runs_events_read_again_soon_after_its_worker_is_killed(
    stack: Stack, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"custodiet": {"1": {"verdict": "BLOCK", "reason": "drift"}}}))
    stack.extra_env["LOOPS_OFFLINE_SCRIPT"] = str(script)
    first = stack.start_worker()
    _, base_url = stack.start_api()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        run_id = start_run(http, task="Write a short guide to reflex loops", audit_probability=1)
        wait_for(http, run_id, lambda state: state["status"] == "blocked")
        before = http.get(f"/runs/{run_id}/events")
        assert before.status_code == 200, before.text

        first.kill()
        second = stack.start_worker()
        wait_until_polling(second)
        started = time.monotonic()
        while (after := http.get(f"/runs/{run_id}/events")).status_code != 200:
            assert after.status_code == 503, after.text
            assert time.monotonic() - started < 30, second.output()
        waited = time.monotonic() - started

    assert after.json() == before.json()
    assert waited < READABLE_WITHIN_S, f"events unreadable for {waited:.1f} s after restart"
