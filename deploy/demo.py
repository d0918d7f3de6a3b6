"""`loops up --demo`: one task sent to the stack's API and followed to its end, its events
printed as they arrive."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

DEMO_TASK = "Write a short guide to caching HTTP responses in a web service"
TERMINAL = {"completed", "stopped", "failed", "halted"}


class StackDown(RuntimeError):
    """One of the stack's processes ended while it started or while the demo ran."""


def http_json(
    method: str, url: str, body: dict[str, Any] | None = None, token: str | None = None
) -> Any:
    if body is None and method != "GET":
        body = {}  # the API takes changes as JSON only: `{}` when there is nothing to say
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def run_demo(
    base: str,
    task: str,
    out: Any,
    alive: Callable[[], bool] = lambda: True,
    token: str | None = None,
) -> dict[str, Any]:
    """POST a task and follow it to the end, printing its events as they arrive; raise
    StackDown as soon as `alive` says a process of the stack has ended. `token`: one of
    the API's LOOPS_API_TOKENS, when it has any."""

    def call(method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return http_json(method, f"{base}{path}", body, token)

    created = call("POST", "/runs", {"task": task})
    run_id = created["run_id"]
    out.write(f"\nDemo run {run_id}: {task}\n")
    seen = 0
    while True:
        if not alive():
            raise StackDown(f"the demo run {run_id} cannot go on")
        for event in call("GET", f"/runs/{run_id}/events?after={seen}"):
            seen = event["seq"]
            payload = event["payload"]
            shown = [key for key in ("score", "verdict", "reason") if key in payload]
            detail = " ".join(f"{key}={payload[key]}" for key in shown)
            out.write(
                f"  #{event['seq']:<3} iter {event['iteration']} {event['phase']} "
                f"{event['event']:<18} {detail}\n"
            )
        status = call("GET", f"/runs/{run_id}")
        if status["status"] in TERMINAL:
            out.write(
                f"Run {run_id} {status['status']} ({status['stop_reason']}), "
                f"score {status['last_score']}, branch {status['branch']} on {status['origin']}\n"
            )
            return dict(status)
        time.sleep(0.5)
