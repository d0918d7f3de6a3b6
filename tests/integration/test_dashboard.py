"""The dashboard in a real browser (Debian's chromium through Playwright) against a real
stack: a dev server, one worker on the offline model, an API with open access and one
with tokens (a writer and a read-only watcher), shared by the module.

Every offline model call takes LATENCY_MS, so a run is still going when its page opens:
what the tests see change, they see change live, on a page that never reloads. The
worker's offline script makes the custodiet block at iteration 1; runs that must not be
blocked are started with audit_probability 0.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, Route, expect

from tests.integration.browser import WAIT_MS, Watched, browser, page, watched
from tests.integration.stack import DevServer, Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

__all__ = ["browser", "page", "watched"]  # fixtures, used by name

LATENCY_MS = "250"
WRITER = "writer-" + uuid.uuid4().hex
WATCHER = "watcher-" + uuid.uuid4().hex
TERMINAL = {"completed", "stopped", "failed", "halted"}


@dataclass
class Dashboard:
    stack: Stack
    base: str  # the API without tokens
    guarded: str  # the API with tokens
    http: httpx.Client

    def start(self, **body: Any) -> str:
        response = self.http.post("/runs", json={"audit_probability": 0, **body})
        assert response.status_code == 201, response.text
        return str(response.json()["run_id"])

    def state(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/runs/{run_id}")
        assert response.status_code == 200, response.text
        state: dict[str, Any] = response.json()
        return state

    def events(self, run_id: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/runs/{run_id}/events")
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()
        return events

    def wait_for(self, run_id: str, statuses: set[str], timeout: float = 120) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = self.state(run_id)
            if state["status"] in statuses:
                return state
            time.sleep(0.2)
        raise AssertionError(f"run {run_id} never {statuses}: {state['status']}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in self.stack.processes)


def dashboard_ui(server: DevServer) -> str:
    return f"http://127.0.0.1:{server.ui_port}"


@pytest.fixture(scope="module")
def dashboard(
    dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dashboard]:
    root = tmp_path_factory.mktemp("dashboard")
    script = root / "offline-script.json"
    script.write_text(json.dumps({"custodiet": {"1": {"verdict": "BLOCK", "reason": "drift"}}}))
    stack = Stack(
        server=dev_server,
        data_dir=root / "data",
        logs=root / "logs",
        extra_env={"LOOPS_OFFLINE_LATENCY_MS": LATENCY_MS, "LOOPS_OFFLINE_SCRIPT": str(script)},
    )
    try:
        stack.start_worker()
        _, base = stack.start_api(LOOPS_TEMPORAL_UI_URL=dashboard_ui(dev_server))
        _, guarded = stack.start_api(
            LOOPS_API_TOKENS=f"alice:{WRITER}", LOOPS_API_READ_TOKENS=f"watcher:{WATCHER}"
        )
        with httpx.Client(base_url=base, timeout=30) as http:
            yield Dashboard(stack, base, guarded, http)
    finally:
        stack.stop_all()


def status_on_screen(page: Page) -> str:
    return page.locator("#run-status").inner_text()


def stays(page: Page) -> None:
    """Mark the loaded document: the mark is gone if the page is ever reloaded."""
    page.evaluate("window.__stayed = true")


def stayed(page: Page) -> bool:
    return bool(page.evaluate("window.__stayed === true"))


def test_a_run_started_from_the_form_completes_on_screen_with_a_point_per_evaluation(
    dashboard: Dashboard, page: Page, watched: Watched
) -> None:
    page.goto(f"{dashboard.base}/ui/runs")
    page.get_by_text("Start a run").click()
    page.get_by_label("Task").fill("Write a short guide to reflex loops")
    page.get_by_label("Mode").select_option("auto")
    page.get_by_label("Audit probability").fill("0")
    page.get_by_role("button", name="Start").click()

    page.wait_for_url("**/ui/runs/write-a-short-guide-to-reflex-loops-*")
    run_id = page.url.split("/ui/runs/", 1)[1]
    stays(page)
    first = status_on_screen(page)
    assert first not in TERMINAL, f"the run had finished before its page showed it: {first}"

    expect(page.locator("#run-status")).to_have_text("completed", timeout=WAIT_MS)
    assert stayed(page), "the page was reloaded"
    assert watched.dialogs == ["Start this run?"]

    # The page redraws its sections after the last event: the chart has every evaluation.
    evaluations = [e for e in dashboard.events(run_id) if e["event"] == "evaluation_done"]
    assert len(evaluations) >= 2, evaluations
    points = page.locator("svg.score-chart circle.point")
    expect(points).to_have_count(len(evaluations))
    scores = [
        float(points.nth(i).get_attribute("data-score") or "") for i in range(len(evaluations))
    ]
    assert scores == [e["payload"]["score"] for e in evaluations]
    # The events list grew live too, to the run's last event.
    last = dashboard.events(run_id)[-1]
    expect(page.locator(f'#event-log li[data-seq="{last["seq"]}"]')).to_have_count(1)
    assert dashboard.state(run_id)["status"] == "completed"
    workflow = page.get_by_role("link", name="workflow in the Temporal UI")
    expected = f"{dashboard_ui(dashboard.stack.server)}/namespaces/default/workflows/{run_id}"
    expect(workflow).to_have_attribute("href", expected)


def test_an_interactive_run_is_approved_by_keyboard_with_an_edited_threshold_and_uses_it(
    dashboard: Dashboard, page: Page, watched: Watched
) -> None:
    run_id = dashboard.start(task="Explain durable execution", mode="interactive")
    page.goto(f"{dashboard.base}/ui/runs/{run_id}")
    stays(page)
    threshold = page.get_by_label("Threshold A", exact=True)
    expect(threshold).to_be_visible()
    expect(page.locator("#run-status")).to_have_text("awaiting_approval")

    # Keyboard only: focus the field, type the new threshold, Enter submits the form.
    threshold.focus()
    page.keyboard.press("Control+A")
    page.keyboard.type("0.55")
    page.keyboard.press("Enter")

    expect(page.locator("#run-status")).to_have_text("completed", timeout=WAIT_MS)
    expect(page.locator("#run-thresholds")).to_contain_text("A 0.55")
    assert stayed(page)
    assert len(watched.dialogs) == 1 and watched.dialogs[0].startswith("Approve run")
    state = dashboard.state(run_id)
    assert state["thresholds"]["A"] == 0.55, state["thresholds"]
    phase_a = [
        e["payload"]["threshold"]
        for e in dashboard.events(run_id)
        if e["event"] == "evaluation_done" and e["phase"] == "A"
    ]
    assert phase_a and set(phase_a) == {0.55}, phase_a


def test_a_blocked_run_shows_its_write_up_and_is_cleared_from_its_page(
    dashboard: Dashboard, page: Page, watched: Watched
) -> None:
    run_id = dashboard.start(task="Write a guide to caching", audit_probability=1)
    page.goto(f"{dashboard.base}/ui/runs/{run_id}")
    stays(page)
    expect(page.locator("#run-status")).to_have_text("blocked", timeout=WAIT_MS)
    report = page.locator(".block-report")
    expect(report).to_contain_text("drift")
    expect(report.locator(".markdown")).not_to_be_empty()
    blocked = dashboard.state(run_id)
    assert blocked["block"]["report"], blocked["block"]

    page.get_by_label("Note for the next step (required)").fill("scope confirmed")
    page.get_by_role("button", name="Clear the block").click()

    expect(page.locator("#run-status")).not_to_have_text("blocked")
    assert stayed(page)
    assert watched.dialogs[-1].startswith("Clear the block of run")
    cleared = [e for e in dashboard.events(run_id) if e["event"] == "block_cleared"]
    assert cleared and cleared[0]["payload"]["note"] == "scope confirmed", cleared


def test_a_task_with_markup_shows_as_text(
    dashboard: Dashboard, page: Page, watched: Watched
) -> None:
    task = 'Guide <script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2">'
    run_id = dashboard.start(task=task, max_iterations=1)
    dashboard.wait_for(run_id, TERMINAL)
    page.goto(f"{dashboard.base}/ui/runs/{run_id}")
    expect(page.locator("p.task")).to_have_text(task)
    # The artifact the offline model writes quotes the task in its title: markdown
    # rendered, its markup as text.
    expect(page.locator(".artifact h1")).to_contain_text("<script>")
    assert page.locator("main script, main img").count() == 0
    assert page.evaluate("typeof window.__pwned") == "undefined"
    page.goto(f"{dashboard.base}/ui/runs")
    expect(page.locator(f'tr[data-run="{run_id}"]')).to_have_count(1)
    assert page.evaluate("typeof window.__pwned") == "undefined"


def test_a_read_only_token_sees_no_actions_and_a_forged_post_from_it_is_refused(
    dashboard: Dashboard, page: Page, watched: Watched
) -> None:
    writer = {"Authorization": f"Bearer {WRITER}"}
    created = httpx.post(
        f"{dashboard.guarded}/runs",
        json={"task": "Summarise the design", "mode": "interactive", "audit_probability": 0},
        headers=writer,
        timeout=30,
    )
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    dashboard.wait_for(run_id, {"awaiting_approval"})

    # Not signed in: the page sends the browser to sign in, and back.
    page.goto(f"{dashboard.guarded}/ui/runs/{run_id}")
    page.wait_for_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API token").fill(WATCHER)
    page.get_by_label("API token").press("Enter")
    page.wait_for_url(f"**/ui/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("awaiting_approval")
    expect(page.get_by_text("watcher (read only)")).to_be_visible()
    assert page.locator("[data-action], [data-start-run]").count() == 0
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["loops_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert WATCHER not in session["value"]
    assert page.evaluate("document.cookie") == ""  # HttpOnly: not for scripts

    # A forged POST from the read-only session, even with the page's CSRF value: refused.
    forged = page.evaluate(
        """async (url) => {
            const csrf = document.querySelector('meta[name="loops-csrf"]').content;
            const send = (headers) => fetch(url, {method: "POST", body: "{}",
                headers: {"Content-Type": "application/json", ...headers}});
            return [(await send({"X-Loops-CSRF": csrf})).status, (await send({})).status];
        }""",
        f"/runs/{run_id}/approve",
    )
    assert forged == [403, 403], forged
    bearer = httpx.post(
        f"{dashboard.guarded}/runs/{run_id}/approve",
        json={},
        headers={"Authorization": f"Bearer {WATCHER}"},
        timeout=30,
    )
    assert bearer.status_code == 403, bearer.text
    assert dashboard.state(run_id)["status"] == "awaiting_approval"
    page.goto(f"{dashboard.guarded}/ui/runs")
    expect(page.locator("#new-run")).to_have_count(0)

    # The writer, signed in the same way, gets the actions: they are there to hide.
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/ui/sign-in"))
    page.goto(f"{dashboard.guarded}/ui/sign-in?next=/ui/runs/{run_id}")
    page.get_by_label("API token").fill(WRITER)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"**/ui/runs/{run_id}")
    expect(page.get_by_role("button", name="Approve")).to_be_visible()
    expect(page.get_by_role("button", name="Stop")).to_be_visible()
    stop = httpx.post(f"{dashboard.guarded}/runs/{run_id}/stop", json={}, headers=writer)
    assert stop.status_code == 202, stop.text


def diamond() -> list[dict[str, Any]]:
    """T-001 first; T-002 and T-003 need it; T-004 needs both: four tasks, four edges."""
    needs = {"T-001": [], "T-002": ["T-001"], "T-003": ["T-001"], "T-004": ["T-002", "T-003"]}
    return [
        {
            "id": task_id,
            "title": f"Write part {task_id}",
            "description": f"Write part {task_id} of a short guide to retries",
            "requires": requires,
            "acceptance_criteria": ["the part exists"],
            "verification_command": "true",
        }
        for task_id, requires in needs.items()
    ]


def test_a_diamond_graph_draws_four_nodes_and_four_edges_whose_statuses_change_live(
    dashboard: Dashboard, page: Page
) -> None:
    created = dashboard.http.post(
        "/graphs",
        json={"goal": "Write a guide to retries", "tasks": diamond(), "audit_probability": 0},
    )
    assert created.status_code == 201, created.text
    graph_id = created.json()["graph_id"]
    page.goto(f"{dashboard.base}/ui/graphs/{graph_id}")
    stays(page)

    nodes = page.locator("svg.dag g.node")
    expect(nodes).to_have_count(4)
    edges = page.locator("svg.dag path.edge")
    expect(edges).to_have_count(4)
    # Read in one go: the page redraws the graph as statuses change, and edges read one
    # attribute at a time could mix two drawings.
    pairs = edges.evaluate_all("paths => paths.map(p => [p.dataset.from, p.dataset.to])")
    drawn = {(start, end) for start, end in pairs}
    assert drawn == {("T-001", "T-002"), ("T-001", "T-003"), ("T-002", "T-004"), ("T-003", "T-004")}

    # Read the nodes' statuses as the page redraws them, until every task is merged.
    seen: dict[str, list[str]] = {}
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        now = page.eval_on_selector_all(
            "svg.dag g.node", "nodes => nodes.map(n => [n.dataset.task, n.dataset.status])"
        )
        for task_id, status in now:
            if not seen.get(task_id) or seen[task_id][-1] != status:
                seen.setdefault(task_id, []).append(status)
        if all(status == "merged" for _, status in now):
            break
        time.sleep(0.2)
    assert stayed(page), "the page was reloaded"
    assert {task: statuses[-1] for task, statuses in seen.items()} == dict.fromkeys(
        ["T-001", "T-002", "T-003", "T-004"], "merged"
    ), f"{seen}\n{dashboard.logs()}"
    assert seen["T-004"][0] == "pending", seen
    assert any("running" in statuses for statuses in seen.values()), seen
    expect(page.locator(".ledger tbody tr")).not_to_have_count(0)

    # Each node links to its loop; the keyboard follows it.
    page.locator('svg.dag a:has(g.node[data-task="T-001"])').focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/ui/runs/{graph_id}/T-001/1")
    expect(page.locator("#run-status")).to_have_text("completed")


def test_the_api_docs_render_offline(dashboard: Dashboard, page: Page) -> None:
    """Every request the page makes off the API's own address fails, as without a network."""
    elsewhere: list[str] = []

    def only_the_api(route: Route) -> None:
        if route.request.url.startswith(f"{dashboard.base}/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_api)
    page.goto(f"{dashboard.base}/docs")
    approve = page.locator(".opblock-summary-path", has_text="/runs/{run_id}/approve")
    # Drawn by script once the page has loaded: Swagger UI's bundle parsed, /openapi.json
    # built and fetched, every operation rendered. Seconds on a loaded machine, past the
    # 5 s an assertion waits by default (the page's own timeout is not an assertion's).
    expect(approve).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator(".opblock")).not_to_have_count(0)
    assert elsewhere == [], elsewhere
