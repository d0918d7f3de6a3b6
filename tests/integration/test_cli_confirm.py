"""Confirm first, at the terminal (docs/cli.md#confirm-first): `loops new` and `loops graph
new` against a real API, worker and dev server, with a terminal faked on stdin (answers
typed in advance) and an editor that is a small script."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.cli import confirm
from loopworks.cli.app import build_parser
from loopworks.cli.client import ApiClient
from loopworks.cli.commands import Context
from loopworks.cli.config import CliConfig
from tests.integration.stack import DevServer, Stack

pytestmark = pytest.mark.integration

TASKS = [
    {
        "id": "T-001",
        "title": "Write the notes",
        "description": "Write NOTES.md with one line.",
        "acceptance_criteria": ["NOTES.md exists"],
        "verification_command": "test -f NOTES.md",
    }
]


class Terminal(io.StringIO):
    """Typed answers on a stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def api(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("confirm")
    stack = Stack(server=dev_server, data_dir=root / "data", logs=root / "logs")
    try:
        stack.start_worker(LOOPS_OFFLINE_LATENCY_MS="20")
        _, base_url = stack.start_api()
        yield base_url
    finally:
        stack.stop_all()


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confirm, "POLL_SECONDS", 0.1)


def loops(api: str, argv: list[str], answers: str | None) -> tuple[int, str, str]:
    """`loops ARGV` in this process; `answers` typed at a terminal (None: no terminal)."""
    args = build_parser().parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    stdin = Terminal(answers) if answers is not None else io.StringIO()
    config = CliConfig(api, None)
    with ApiClient(config) as client:
        code = args.handler(Context(config, client, out=out, stdin=stdin, err=err), args)
    return code, out.getvalue(), err.getvalue()


def get(api: str, path: str) -> Any:
    response = httpx.get(api + path, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(api: str, path: str, check: Any, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        state = get(api, path)
        if check(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.2)


def events(api: str, run_id: str) -> list[dict[str, Any]]:
    return list(get(api, f"/runs/{run_id}/events"))


def editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    """$EDITOR: a script that loads the YAML it is given, runs `change` on it as `doc`,
    and saves it."""
    script = tmp_path / "edit.py"
    script.write_text(
        "import sys, yaml\n"
        "path = sys.argv[1]\n"
        "doc = yaml.safe_load(open(path))\n"
        f"{change}\n"
        "open(path, 'w').write(yaml.safe_dump(doc))\n"
    )
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", f"{sys.executable} {script}")


def test_new_at_a_terminal_shows_the_draft_and_approves_it(api: str) -> None:
    code, out, err = loops(api, ["new", "Write a short guide to reflex loops"], "a\n")
    assert code == 0, err
    run_id = out.strip()
    assert f"run {run_id} drafted its criteria" in err
    assert "rules:" in err and "max iterations: 4" in err
    assert "Approve, edit or cancel? [a/e/c] (a): " in err
    assert f"approved: run {run_id} starts iterating" in err
    [approved] = [e for e in events(api, f"{run_id}") if e["event"] == "approved"]
    assert approved["payload"]["edits"] == {}


def test_an_edit_in_the_editor_is_shown_again_then_approved(
    api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    editor(tmp_path, monkeypatch, "doc['max_iterations'] = 1\ndoc['rules'] = doc['rules'][:1]")
    code, out, err = loops(api, ["new", "Write a short guide to reflex loops"], "e\na\n")
    assert code == 0, err
    run_id = out.strip()
    drafts = err.split("drafted its criteria")
    assert len(drafts) == 3, err  # shown, edited, shown again
    assert "max iterations: 4" in drafts[1] and "max iterations: 1" in drafts[2]
    [approved] = [e for e in events(api, run_id) if e["event"] == "approved"]
    edits = approved["payload"]["edits"]
    assert edits["max_iterations"] == 1 and len(edits["rules"]) == 1
    state = wait_for(api, f"/runs/{run_id}", lambda s: s["status"] != "awaiting_approval")
    assert state["max_iterations"] == 1 and len(state["rules"]) == 1


def test_cancel_stops_the_run_before_it_iterates(api: str) -> None:
    code, out, err = loops(api, ["new", "Write a short guide to reflex loops"], "c\n")
    assert code == 1
    run_id = out.strip()
    assert f"cancelled: run {run_id} stops without iterating" in err
    state = wait_for(api, f"/runs/{run_id}", lambda s: s["status"] == "stopped")
    assert state["status"] == "stopped" and state["iteration"] == 0
    assert state["stop"]["message"] == confirm.CANCEL_REASON


def test_auto_and_no_terminal_start_at_once(api: str) -> None:
    # --auto at a terminal asks nothing (a "c" typed would cancel); no terminal: the same.
    cases: list[tuple[list[str], str | None]] = [
        (["new", "Write a guide", "--auto"], "c\n"),
        (["new", "Write a guide"], None),
    ]
    for argv, answers in cases:
        code, out, err = loops(api, argv, answers)
        assert (code, err) == (0, "")
        run_id = out.strip()
        state = wait_for(api, f"/runs/{run_id}", lambda s: s["iteration"] >= 1)
        assert state["iteration"] >= 1, state
        assert "approved" not in [e["event"] for e in events(api, run_id)]


def test_graph_new_at_a_terminal_shows_the_tasks_and_takes_an_edit(
    api: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(TASKS))
    editor(tmp_path, monkeypatch, "doc[0]['title'] = 'Write the short notes'")
    argv = ["graph", "new", "Notes", "--tasks-file", str(tasks)]
    code, out, err = loops(api, argv, "e\na\n")
    assert code == 0, err
    graph_id = out.strip()
    assert "  T-001  Write the notes" in err and "  T-001  Write the short notes" in err
    assert f"approved: graph {graph_id} starts its tasks" in err
    state = get(api, f"/graphs/{graph_id}")
    assert [t["task"]["title"] for t in state["tasks"]] == ["Write the short notes"]
    httpx.post(f"{api}/graphs/{graph_id}/stop", json={}, timeout=30)


def test_graph_cancel_stops_it_before_any_task(api: str, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(TASKS))
    code, out, err = loops(api, ["graph", "new", "Notes", "--tasks-file", str(tasks)], "c\n")
    assert code == 1, err
    graph_id = out.strip()
    state = wait_for(api, f"/graphs/{graph_id}", lambda s: s["status"] == "stopped")
    assert state["status"] == "stopped"
    assert all(t["status"] == "pending" for t in state["tasks"]), state["tasks"]
