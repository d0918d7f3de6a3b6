"""`loops graph ...` against a fake API whose answers are built from the API's models
(`GraphState`, `GraphCreated`, `GraphListed`, `LedgerLine`, `RunState`): each command's
request (method, path, body), its output off a terminal, and `status --follow` polling
until the graph ends, with exit 0 only when it completed."""

from __future__ import annotations

import http.server
import io
import json
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.api.models import GraphCreated, GraphListed
from loopworks.cli import commands, graphs
from loopworks.cli.app import build_parser, main
from loopworks.cli.client import ApiClient, ApiError, CliError
from loopworks.cli.config import CliConfig
from loopworks.schemas.graph import GraphState, GraphStatus, TaskState
from loopworks.schemas.tasks import LedgerLine, Task, TaskStatus
from tests.cli.sample import RUN_ID, STATE, wire, wire_list

pytestmark = pytest.mark.unit

GRAPH_ID = "graph-add-a-parser-20261122-051141-c0b93a"
BRANCH = f"loops/{GRAPH_ID}"


def task(task_id: str, title: str, requires: Iterable[str] = ()) -> Task:
    return Task(
        id=task_id,
        title=title,
        description=f"{title}, and nothing else",
        requires=list(requires),
        acceptance_criteria=[f"{title} is done"],
        verification_command="pytest -q",
    )


TASKS = [
    task("T-001", "Add the parser"),
    task("T-002", "Use the parser", ["T-001"]),
    task("T-003", "Document it", ["T-001", "T-002"]),
]


def graph_state(
    status: GraphStatus,
    tasks: dict[str, tuple[TaskStatus, int]] | None = None,
    **fields: Any,
) -> GraphState:
    """The graph with each task's (status, attempts); its runs are `<graph>/<task>/<n>`."""
    states = [
        TaskState(
            task=t,
            status=tasks[t.id][0],
            attempts=tasks[t.id][1],
            run_ids=[f"{GRAPH_ID}/{t.id}/{n}" for n in range(1, tasks[t.id][1] + 1)],
        )
        for t in TASKS
        if tasks is not None
    ]
    defaults: dict[str, Any] = {
        "graph_id": GRAPH_ID,
        "goal": "Add a parser and use it",
        "status": status,
        "origin": "/srv/origin.git",
        "integration_branch": BRANCH if tasks else "",
        "integration_commit": "0123456789abcdef" if tasks else "",
        "source": "planner" if tasks else "",
        "tasks": states,
        "updated_at": "2026-11-22T05:20:00+00:00",
    }
    return GraphState.model_validate({**defaults, **fields})


PENDING, IN_PROGRESS, COMPLETED, FAILED, BLOCKED = (
    TaskStatus.PENDING,
    TaskStatus.IN_PROGRESS,
    TaskStatus.COMPLETED,
    TaskStatus.FAILED,
    TaskStatus.BLOCKED,
)
PLANNING = graph_state(GraphStatus.PLANNING)
RUNNING = graph_state(
    GraphStatus.RUNNING,
    {"T-001": (COMPLETED, 1), "T-002": (IN_PROGRESS, 2), "T-003": (PENDING, 0)},
)
DONE = graph_state(
    GraphStatus.COMPLETED,
    {"T-001": (COMPLETED, 1), "T-002": (COMPLETED, 2), "T-003": (COMPLETED, 1)},
    message="every task completed",
)


def json_of(model: Any) -> httpx.Response:
    return httpx.Response(200, json=wire(model))


class FakeApi:
    """Answers by (method, path); a list of answers is given one per request, the last
    repeated. Records every request."""

    def __init__(self, answers: dict[tuple[str, str], httpx.Response | list[httpx.Response]]):
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.get((request.method, request.url.path))
        if answer is None:
            return httpx.Response(404, json={"detail": "Not Found"})
        if isinstance(answer, list):
            return answer.pop(0) if len(answer) > 1 else answer[0]
        return answer

    def calls(self) -> list[tuple[str, str]]:
        return [(r.method, r.url.path) for r in self.requests]

    def body(self, index: int = -1) -> Any:
        content = self.requests[index].content
        return json.loads(content) if content else None


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(argv: list[str], api: FakeApi, out: io.StringIO | None = None) -> tuple[int, str]:
    args = build_parser().parse_args(["graph", *argv])
    config = CliConfig("http://api.test", None)
    out = out if out is not None else io.StringIO()
    client = ApiClient(config, transport=httpx.MockTransport(api))
    code = args.handler(commands.Context(config, client, out=out), args)
    return code, out.getvalue()


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graphs, "POLL_SECONDS", 0)


GRAPH = f"/graphs/{GRAPH_ID}"
CREATED = httpx.Response(
    201, json=wire(GraphCreated(graph_id=GRAPH_ID, status_url=f"/graphs/{GRAPH_ID}"))
)

STATUS_TREE = f"""\
goal: Add a parser and use it
integration: {BRANCH} @ 01234567 on /srv/origin.git
tasks from: planner
{GRAPH_ID}  running  1/3 completed, 1 pending, 1 in-progress
├── T-001  completed    Add the parser · 1 attempt · run {GRAPH_ID}/T-001/1
├── T-002  in-progress  Use the parser · 2 attempts · run {GRAPH_ID}/T-002/2
│   └── requires: T-001
└── T-003  pending      Document it
    └── requires: T-001, T-002
"""


# --- new ------------------------------------------------------------------------------


def test_new_sends_the_goal_and_options_and_prints_only_the_graph_id(tmp_path: Path) -> None:
    tasks_file = tmp_path / "tasks.yaml"
    tasks_file.write_text(
        "- id: T-001\n  title: Add the parser\n  description: d\n"
        "  acceptance_criteria: [parses]\n  verification_command: pytest -q\n"
    )
    api = FakeApi({("POST", "/graphs"): CREATED})
    argv = ["new", "Add a parser", "--repo", "/srv/repo.git", "--base-branch", "main"]
    argv += ["--tasks-file", str(tasks_file), "--max-parallel", "2", "--interactive"]
    argv += ["--max-iterations", "3", "--audit-probability", "0"]
    assert run(argv, api) == (0, f"{GRAPH_ID}\n")
    assert api.calls() == [("POST", "/graphs")]
    assert api.body() == {
        "goal": "Add a parser",
        "repo": "/srv/repo.git",
        "base_branch": "main",
        "max_parallel": 2,
        "max_iterations": 3,
        "audit_probability": 0.0,
        "mode": "interactive",
        "tasks": [
            {
                "id": "T-001",
                "title": "Add the parser",
                "description": "d",
                "acceptance_criteria": ["parses"],
                "verification_command": "pytest -q",
            }
        ],
    }


def test_new_sends_a_local_repo_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    api = FakeApi({("POST", "/graphs"): CREATED})
    run(["new", "g", "--repo", "."], api)
    assert api.body()["repo"] == str(tmp_path)


def test_new_without_options_sends_only_the_goal() -> None:
    api = FakeApi({("POST", "/graphs"): CREATED})
    run(["new", "Add a parser"], api)
    assert api.body() == {"goal": "Add a parser"}


def test_new_with_follow_prints_the_id_then_follows() -> None:
    api = FakeApi(
        {("POST", "/graphs"): CREATED, ("GET", GRAPH): [json_of(PLANNING), json_of(DONE)]}
    )
    code, out = run(["new", "Add a parser", "--follow"], api)
    assert code == 0
    assert out.startswith(f"{GRAPH_ID}\ngoal: Add a parser and use it\n")
    assert "· 3 tasks from the planner\n· graph planning → completed\n" in out
    assert api.calls() == [("POST", "/graphs"), ("GET", GRAPH), ("GET", GRAPH)]


def test_a_json_tasks_file(tmp_path: Path) -> None:
    tasks = [t.model_dump(mode="json") for t in TASKS]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    api = FakeApi({("POST", "/graphs"): CREATED})
    run(["new", "g", "--tasks-file", str(path)], api)
    assert api.body()["tasks"] == tasks


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("goal: not a list\n", "must hold a list of tasks"),
        ("[]\n", "must hold a list of tasks"),
        ("- [unclosed\n", "is neither JSON nor YAML"),
    ],
)
def test_a_bad_tasks_file_fails_before_any_request(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(text)
    api = FakeApi({})
    with pytest.raises(CliError, match=error):
        run(["new", "g", "--tasks-file", str(path)], api)
    with pytest.raises(CliError, match="cannot read"):
        run(["approve", GRAPH_ID, "--tasks-file", str(tmp_path / "missing.yaml")], api)
    assert api.requests == []


def test_the_apis_refusal_of_the_tasks_is_its_message() -> None:
    message = "tasks: T-002 requires T-009, which is not a task of the graph"
    api = FakeApi(
        {("POST", "/graphs"): httpx.Response(422, json={"detail": [], "message": message})}
    )
    with pytest.raises(ApiError) as raised:
        run(["new", "g"], api)
    assert str(raised.value) == f"HTTP 422: {message}"


# --- status ---------------------------------------------------------------------------


def test_status_prints_the_task_tree() -> None:
    api = FakeApi({("GET", GRAPH): json_of(RUNNING)})
    assert run(["status", GRAPH_ID], api) == (0, STATUS_TREE)
    assert api.calls() == [("GET", GRAPH)]


def test_status_lists_the_prep_package_lines_skipped_and_the_loops_limit() -> None:
    skipped = [
        "line 2: not JSON (Unterminated string starting at column 209)",
        "line 4: description missing (a task needs both)",
    ]
    state = graph_state(
        GraphStatus.RUNNING,
        {"T-001": (COMPLETED, 1), "T-002": (PENDING, 0), "T-003": (PENDING, 0)},
        source="prep package (collaborative-plan-with-file, sha256 ab12)",
        prep_skipped=skipped,
        max_iterations=6,
    )
    api = FakeApi({("GET", GRAPH): json_of(state)})
    _, out = run(["status", GRAPH_ID], api)
    assert (
        "tasks from: prep package (collaborative-plan-with-file, sha256 ab12)\n"
        "each task loop: at most 6 iterations\n"
        "prep package line skipped: line 2: not JSON (Unterminated string starting at "
        "column 209)\n"
        "prep package line skipped: line 4: description missing (a task needs both)\n"
    ) in out
    rejected = graph_state(
        GraphStatus.RUNNING,
        {t.id: (PENDING, 0) for t in TASKS},
        source="planner",
        prep_rejected=["prep-package is 25h old (max 24h), may be stale"],
    )
    api = FakeApi({("GET", GRAPH): json_of(rejected)})
    _, out = run(["status", GRAPH_ID], api)
    assert "prep package not used: prep-package is 25h old (max 24h), may be stale\n" in out


def test_status_shows_failures_and_what_a_graph_waits_for() -> None:
    failed = graph_state(
        GraphStatus.FAILED,
        {"T-001": (FAILED, 3), "T-002": (BLOCKED, 0), "T-003": (BLOCKED, 0)},
        message="T-001 failed 3 times",
    )
    failed.tasks[0].last_failure = "verification exited 1:\n  2 failed"
    api = FakeApi({("GET", GRAPH): json_of(failed)})
    _, out = run(["status", GRAPH_ID], api)
    assert "0/3 completed, 1 failed, 2 blocked" in out
    assert "├── T-001  failed   Add the parser · 3 attempts" in out
    assert "│   └── last failure: verification exited 1: 2 failed\n" in out
    assert out.endswith("failed: T-001 failed 3 times\n")

    waiting = graph_state(GraphStatus.AWAITING_APPROVAL, {t.id: (PENDING, 0) for t in TASKS})
    api = FakeApi({("GET", GRAPH): json_of(waiting)})
    assert run(["status", GRAPH_ID], api)[1].endswith(
        f"awaiting approval (approve with: loops graph approve {GRAPH_ID})\n"
    )
    api = FakeApi({("GET", GRAPH): json_of(PLANNING)})
    assert run(["status", GRAPH_ID], api)[1] == (
        f"goal: Add a parser and use it\n{GRAPH_ID}  planning  no tasks yet\n"
    )


def test_status_shows_what_the_graph_spent_of_its_total_budget() -> None:
    spent = graph_state(
        GraphStatus.FAILED,
        {"T-001": (COMPLETED, 1), "T-002": (BLOCKED, 1), "T-003": (BLOCKED, 0)},
        total_budget={"max_tokens": 50_000, "max_cost_usd": 2},
        usage={"input_tokens": 40_000, "output_tokens": 12_345, "calls": 30, "cost_usd": 0.98765},
        message="the graph's budget is spent: used 52345 tokens of 50000; "
        "not started: T-002, T-003",
    )
    api = FakeApi({("GET", GRAPH): json_of(spent)})
    _, out = run(["status", GRAPH_ID], api)
    assert "tasks from: planner\nspent: 52,345 tokens of 50,000, $0.9877 of $2.00\n" in out
    assert out.endswith(
        "failed: the graph's budget is spent: used 52345 tokens of 50000; "
        "not started: T-002, T-003\n"
    )
    # A graph with no total shows what it spent once it spent anything.
    unbounded = spent.model_copy(update={"total_budget": None})
    api = FakeApi({("GET", GRAPH): json_of(unbounded)})
    assert "\nspent: 52,345 tokens, $0.9877\n" in run(["status", GRAPH_ID], api)[1]


def test_status_json_is_the_apis_state() -> None:
    api = FakeApi({("GET", GRAPH): json_of(RUNNING)})
    code, out = run(["status", GRAPH_ID, "--json"], api)
    assert code == 0 and GraphState.model_validate_json(out) == RUNNING


def test_follow_polls_until_completed_and_exits_0() -> None:
    first_done = graph_state(
        GraphStatus.RUNNING,
        {"T-001": (COMPLETED, 1), "T-002": (IN_PROGRESS, 1), "T-003": (PENDING, 0)},
    )
    states = [PLANNING, PLANNING, first_done, RUNNING, RUNNING, DONE]
    api = FakeApi({("GET", GRAPH): [json_of(state) for state in states]})
    code, out = run(["status", GRAPH_ID, "--follow"], api)
    assert code == 0
    assert api.calls() == [("GET", GRAPH)] * len(states)
    changes = [line for line in out.splitlines() if line.startswith("· ")]
    assert changes == [
        "· 3 tasks from the planner",
        "· graph planning → running",
        f"· T-002 attempt 2 (run {GRAPH_ID}/T-002/2)",
        "· T-002 in-progress → completed",
        "· T-003 pending → completed",
        "· graph running → completed",
    ]
    # The tree at the start (still planning) and at the end.
    assert out.startswith(f"goal: Add a parser and use it\n{GRAPH_ID}  planning  no tasks yet\n")
    assert out.endswith(
        f"└── T-003  completed  Document it · 1 attempt · run {GRAPH_ID}/T-003/1\n"
        "    └── requires: T-001, T-002\ncompleted: every task completed\n"
    )


def test_following_a_graph_that_comes_to_wait_for_approval_says_how_to_approve() -> None:
    waiting = graph_state(GraphStatus.AWAITING_APPROVAL, {t.id: (PENDING, 0) for t in TASKS})
    states = [PLANNING, waiting, waiting, RUNNING, DONE]
    api = FakeApi({("GET", GRAPH): [json_of(state) for state in states]})
    _, out = run(["status", GRAPH_ID, "--follow"], api)
    hint = f"! awaiting approval (approve with: loops graph approve {GRAPH_ID})"
    lines = out.splitlines()
    assert lines.count(hint) == 1
    assert lines[lines.index(hint) - 1] == "· graph planning → awaiting_approval"


@pytest.mark.parametrize("status", [GraphStatus.FAILED, GraphStatus.STOPPED])
def test_follow_exits_1_when_the_graph_did_not_complete(status: GraphStatus) -> None:
    ended = RUNNING.model_copy(update={"status": status, "message": "why"})
    api = FakeApi({("GET", GRAPH): [json_of(RUNNING), json_of(ended)]})
    code, out = run(["status", GRAPH_ID, "--follow"], api)
    assert code == 1
    assert f"· graph running → {status.value}\n" in out
    assert out.endswith(f"{status.value}: why\n")


def test_follow_of_an_ended_graph_prints_it_once() -> None:
    api = FakeApi({("GET", GRAPH): json_of(DONE)})
    code, out = run(["status", GRAPH_ID, "--follow"], api)
    assert code == 0 and out.count("goal:") == 1
    assert api.calls() == [("GET", GRAPH)]


def test_follow_json_prints_only_the_final_state() -> None:
    api = FakeApi({("GET", GRAPH): [json_of(RUNNING), json_of(DONE)]})
    code, out = run(["status", GRAPH_ID, "--follow", "--json"], api)
    assert code == 0 and GraphState.model_validate_json(out) == DONE


def test_follow_rides_out_an_unavailable_api_but_not_a_404() -> None:
    unavailable = httpx.Response(503, json={"detail": "no worker answered the status query"})
    answers = [json_of(RUNNING), unavailable, unavailable, json_of(DONE)]
    api = FakeApi({("GET", GRAPH): answers})
    assert run(["status", GRAPH_ID, "--follow"], api)[0] == 0
    assert len(api.requests) == 4

    gone = httpx.Response(404, json={"detail": f"run {GRAPH_ID} not found"})
    api = FakeApi({("GET", GRAPH): [json_of(RUNNING), gone]})
    with pytest.raises(ApiError, match="HTTP 404"):
        run(["status", GRAPH_ID, "--follow"], api)

    api = FakeApi({("GET", GRAPH): [json_of(RUNNING), unavailable]})
    with pytest.raises(CliError, match=f"gave up following graph {GRAPH_ID}: HTTP 503"):
        run(["status", GRAPH_ID, "--follow"], api)
    assert len(api.requests) == 2 + graphs.MAX_POLL_FAILURES


def test_follow_on_a_terminal_redraws_in_place_and_keeps_the_final_tree() -> None:
    api = FakeApi({("GET", GRAPH): [json_of(RUNNING), json_of(DONE)]})
    code, out = run(["status", GRAPH_ID, "--follow"], api, out=Terminal())
    assert code == 0
    assert "\x1b[" in out  # rich's Live, not plain lines
    assert "T-002 in-progress → completed" in out
    assert "completed: every task completed" in out


# --- ledger and list --------------------------------------------------------------------

LEDGER = [
    LedgerLine(id="T-001", status=IN_PROGRESS, updated_at="2026-11-22T05:12:00Z"),
    LedgerLine(
        id="T-001",
        status=COMPLETED,
        updated_at="2026-11-22T05:15:00Z",
        summary="parser added",
        run_id=f"{GRAPH_ID}/T-001/1",
        exit_code=0,
    ),
    LedgerLine(id="T-002", status=FAILED, updated_at="2026-11-22T05:18:00Z", attempt=2),
]
LEDGER_TEXT = "".join(line.to_jsonl() + "\n" for line in LEDGER)
NDJSON = {"content-type": "application/x-ndjson"}


def test_ledger_json_is_the_lines_as_the_graph_wrote_them() -> None:
    api = FakeApi(
        {("GET", f"{GRAPH}/ledger"): httpx.Response(200, text=LEDGER_TEXT, headers=NDJSON)}
    )
    assert run(["ledger", GRAPH_ID, "--json"], api) == (0, LEDGER_TEXT)
    assert api.requests[0].headers["accept"] == "application/x-ndjson"


class LongLedger(http.server.BaseHTTPRequestHandler):
    """An API whose ledger is longer than a pipe holds."""

    body = LEDGER_TEXT.encode() * 20_000

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: Any) -> None:
        pass


def test_a_reader_that_stops_reading_ends_the_command_quietly() -> None:
    """`loops graph ledger G --json | head -1`: the closed pipe was a traceback."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), LongLedger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        loops = subprocess.Popen(
            [sys.executable, "-m", "loopworks.cli", "--url", url, "graph", "ledger", "g", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert loops.stdout is not None and loops.stderr is not None
        first = loops.stdout.readline()
        loops.stdout.close()  # as `head -1` does
        code = loops.wait(timeout=60)
        err = loops.stderr.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert first.decode() == LEDGER_TEXT.splitlines(keepends=True)[0]
    assert (code, err) == (141, ""), err


def test_ledger_table() -> None:
    api = FakeApi(
        {("GET", f"{GRAPH}/ledger"): httpx.Response(200, text=LEDGER_TEXT, headers=NDJSON)}
    )
    code, out = run(["ledger", GRAPH_ID], api)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    first_run = f"{GRAPH_ID}/T-001/1"
    assert rows[0] == ["TASK", "STATUS", "ATTEMPT", "UPDATED", "RUN", "EXIT", "SUMMARY"]
    assert rows[1:] == [
        ["T-001", "in-progress", "1", "2026-11-22T05:12:00Z", "-", "-", "-"],
        ["T-001", "completed", "1", "2026-11-22T05:15:00Z", first_run, "0", "parser", "added"],
        ["T-002", "failed", "2", "2026-11-22T05:18:00Z", "-", "-", "-"],
    ]
    api = FakeApi({("GET", f"{GRAPH}/ledger"): httpx.Response(200, text="", headers=NDJSON)})
    assert run(["ledger", GRAPH_ID], api)[1] == f"no ledger lines yet for {GRAPH_ID}\n"
    api = FakeApi({("GET", f"{GRAPH}/ledger"): httpx.Response(200, text='{"id": 1}\n')})
    with pytest.raises(CliError, match="unexpected ledger line"):
        run(["ledger", GRAPH_ID], api)


LISTED = [
    GraphListed(
        graph_id=GRAPH_ID,
        status="running",
        start_time="2026-11-22T05:11:41+00:00",
        started_by="alice",
    ),
    GraphListed(graph_id="graph-older-20261121-000000-aaaaaa", status="completed"),
]


def test_list() -> None:
    api = FakeApi({("GET", "/graphs"): httpx.Response(200, json=wire_list(LISTED))})
    code, out = run(["list", "--limit", "5"], api)
    assert code == 0
    assert api.requests[0].url.params["limit"] == "5"
    assert [line.split() for line in out.splitlines()] == [
        ["GRAPH_ID", "STATUS", "STARTED", "BY"],
        [GRAPH_ID, "running", "2026-11-22T05:11:41Z", "alice"],
        ["graph-older-20261121-000000-aaaaaa", "completed", "-", "-"],
    ]
    listed = json.loads(run(["list", "--json"], api)[1])
    assert [GraphListed.model_validate(item) for item in listed] == LISTED
    api = FakeApi({("GET", "/graphs"): httpx.Response(200, json=[])})
    assert run(["list"], api)[1] == "no graphs\n"


# --- steering ---------------------------------------------------------------------------

PAUSED = RUNNING.model_copy(update={"status": GraphStatus.PAUSED})


def test_stop_sends_the_reason() -> None:
    api = FakeApi({("POST", f"{GRAPH}/stop"): httpx.Response(202, json=wire(RUNNING))})
    code, out = run(["stop", GRAPH_ID, "--reason", "enough"], api)
    assert code == 0
    assert api.calls() == [("POST", f"{GRAPH}/stop")] and api.body() == {"reason": "enough"}
    assert out.startswith(f"stop requested for {GRAPH_ID}; its running task loops push")
    run(["stop", GRAPH_ID], api)
    assert api.body() == {}


@pytest.mark.parametrize(
    ("argv", "action", "body", "answer", "output"),
    [
        (
            ["pause", GRAPH_ID],
            "pause",
            {},
            PAUSED,
            f"{GRAPH_ID} | paused | 1/3 completed, 1 pending, 1 in-progress"
            f" | 2026-11-22T05:20:00Z\npaused (continue with: loops graph resume {GRAPH_ID})\n",
        ),
        (
            ["resume", GRAPH_ID],
            "resume",
            {},
            RUNNING,
            f"{GRAPH_ID} | running | 1/3 completed, 1 pending, 1 in-progress"
            " | 2026-11-22T05:20:00Z\n",
        ),
        (
            ["approve", GRAPH_ID, "--note", "go"],
            "approve",
            {"note": "go"},
            RUNNING,
            f"{GRAPH_ID} | running | 1/3 completed, 1 pending, 1 in-progress"
            " | 2026-11-22T05:20:00Z\n",
        ),
    ],
)
def test_messages_post_to_their_routes(
    argv: list[str], action: str, body: Any, answer: GraphState, output: str
) -> None:
    api = FakeApi({("POST", f"{GRAPH}/{action}"): json_of(answer)})
    assert run(argv, api) == (0, output)
    assert api.calls() == [("POST", f"{GRAPH}/{action}")]
    assert api.body() == body


def test_approve_with_an_edited_task_list(tmp_path: Path) -> None:
    tasks = [t.model_dump(mode="json") for t in TASKS[:2]]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    api = FakeApi({("POST", f"{GRAPH}/approve"): json_of(RUNNING)})
    run(["approve", GRAPH_ID, "--tasks-file", str(path)], api)
    assert api.body() == {"tasks": tasks}


def test_clear_block_names_the_task_and_prints_its_loop() -> None:
    api = FakeApi({("POST", f"{GRAPH}/clear-block"): json_of(STATE)})
    code, out = run(["clear-block", GRAPH_ID, "--task", "T-002", "--note", "in scope"], api)
    assert code == 0
    assert api.body() == {"task": "T-002", "note": "in scope"}
    assert out.startswith("write-a-short-guide-to-reflex-loops | completed | 2/4")
    assert STATE.run_id == RUN_ID


def test_the_apis_conflict_is_its_message() -> None:
    answer = httpx.Response(409, json={"detail": "task T-002 of graph x is not running"})
    api = FakeApi({("POST", f"{GRAPH}/clear-block"): answer})
    with pytest.raises(ApiError) as raised:
        run(["clear-block", GRAPH_ID, "--task", "T-002", "--note", "n"], api)
    assert str(raised.value) == "HTTP 409: task T-002 of graph x is not running"


# --- main -----------------------------------------------------------------------------


def test_graph_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["graph"],
        ["graph", "nope"],
        ["graph", "status"],
        ["graph", "clear-block", GRAPH_ID, "--note", "n"],
        ["graph", "new", "g", "--max-parallel", "0"],
    ):
        with pytest.raises(SystemExit) as raised:
            main(argv)
        assert raised.value.code == 2, argv
    assert "usage: loops graph" in capsys.readouterr().err


def test_an_api_error_exits_1_with_its_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--url", "http://127.0.0.1:9", "graph", "status", GRAPH_ID]) == 1
    assert "cannot reach the API at http://127.0.0.1:9" in capsys.readouterr().err
