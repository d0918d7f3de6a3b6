"""A run a person can steer from the CLI: `loops status` shows the plan, the rules, the
verdicts and the gate; run commands take an alias (docs/cli.md#naming-a-run); `loops clean
--all` cleans every finished run after one question."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta

import httpx
import pytest
from rich.console import Console

from loopworks.api.models import RunSummary, RunWorkspace, WorkspaceEntry, WorkspaceRemoved
from loopworks.cli import confirm
from loopworks.cli.client import CliError
from loopworks.schemas.detail import (
    AuditView,
    CriticView,
    CritiqueView,
    EvaluationView,
    Gate,
    GateView,
    IssueView,
    PlanView,
    RuleOutcome,
    Verdicts,
)
from loopworks.schemas.roles import AuditVerdict, CriticVerdict
from loopworks.schemas.rules import Phase, Severity
from loopworks.schemas.run import RunStatus
from tests.cli.sample import RUN_ID, STATE, wire, wire_list
from tests.cli.test_commands import Recorder, TtyInput, run

pytestmark = pytest.mark.unit

ALIAS = "fix-the-docs"
T0 = datetime.fromisoformat("2026-11-22T05:00:00+00:00")


def summary(n: int, status: RunStatus) -> RunSummary:
    return RunSummary(
        run_id=f"{ALIAS}-20261122-05000{n}-00000{n}",
        alias=ALIAS,
        status=status,
        started_at=T0 + timedelta(seconds=n),
    )


def test_status_shows_the_gate_plan_rules_and_verdicts() -> None:
    state = STATE.model_copy(
        update={
            "status": RunStatus.BLOCKED,
            "gate": GateView(
                kind=Gate.BLOCK,
                since="2026-11-22T05:11:50+00:00",
                release=f"/runs/{RUN_ID}/clear-block",
            ),
            "plan": PlanView(iteration=2, focus="close the gaps", steps=["Add a summary"]),
            "evaluation": EvaluationView(
                iteration=2,
                phase=Phase.A,
                score=0.5,
                threshold=0.8,
                passed=False,
                rules=[
                    RuleOutcome(id="has-title", severity=Severity.FAIL, passed=True, detail="ok"),
                    RuleOutcome(
                        id="summary", severity=Severity.WARN, passed=False, detail="no summary"
                    ),
                ],
            ),
            "verdicts": Verdicts(
                critic=CriticView(verdict=CriticVerdict.PROCEED, feedback="fine plan"),
                artifact_critic=CritiqueView(
                    iteration=1,
                    issues=[IssueView(rule_id="summary", problem="none", fix="add one")],
                ),
                custodiet=AuditView(iteration=2, verdict=AuditVerdict.BLOCK, reason="curl"),
            ),
        }
    )
    api = Recorder({("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(state))})
    code, out = run(["status", RUN_ID], api)
    assert code == 0
    # An id shaped as the API makes them is used as it is, without an alias lookup.
    assert [r.url.path for r in api.requests] == [f"/runs/{RUN_ID}"]
    lines = out.splitlines()
    assert lines[
        lines.index(
            f"waits at: block since 2026-11-22T05:11:50Z (release: loops clear-block {RUN_ID})"
        ) :
    ] == [
        f"waits at: block since 2026-11-22T05:11:50Z (release: loops clear-block {RUN_ID})",
        "plan (iteration 2): close the gaps",
        "  1. Add a summary",
        "evaluation (iteration 2, phase A): score 0.50 / 0.80 FAIL",
        "  pass has-title fail ok",
        "  FAIL summary   warn no summary",
        "critic: PROCEED: fine plan",
        "artifact critic (iteration 1): 1 issue",
        "    summary: add one",
        "custodiet (iteration 2): BLOCK: curl",
    ]


def test_status_says_where_the_plan_came_from_or_why_a_prep_package_was_not_used() -> None:
    """A run reads the repository's prep package (docs/graphs.md#prep-packages); its status
    says what it made of it, as `loops graph status` does for a graph."""
    used = STATE.model_copy(
        update={
            "prep": "prep package (collaborative-plan-with-file, sha256 ab12)",
            "prep_skipped": ["line 2: not JSON (Expecting value at column 1)"],
        }
    )
    rejected = STATE.model_copy(
        update={"prep_rejected": ["generated_at 2026-01-01T00:00:00Z is more than 24 hours old"]}
    )
    outs = []
    for state in (used, rejected):
        api = Recorder({("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(state))})
        code, out = run(["status", RUN_ID], api)
        assert code == 0
        outs.append(out.splitlines())
    assert "plan from: prep package (collaborative-plan-with-file, sha256 ab12)" in outs[0]
    assert "prep package line skipped: line 2: not JSON (Expecting value at column 1)" in outs[0]
    assert (
        "prep package not used: generated_at 2026-01-01T00:00:00Z is more than 24 hours old"
        in outs[1]
    )


def by_alias(runs: list[RunSummary], then: RunSummary) -> Recorder:
    return Recorder(
        {
            ("GET", "/runs"): httpx.Response(200, json=wire_list(runs)),
            ("GET", f"/runs/{then.run_id}"): httpx.Response(
                200, json=wire(STATE.model_copy(update={"run_id": then.run_id}))
            ),
            ("POST", f"/runs/{then.run_id}/stop"): httpx.Response(200, json=wire(STATE)),
        }
    )


def test_an_alias_names_its_live_run_over_newer_finished_ones() -> None:
    live, old = summary(1, RunStatus.RUNNING), summary(0, RunStatus.COMPLETED)
    newer = summary(2, RunStatus.STOPPED)
    api = by_alias([newer, live, old], then=live)
    code, out = run(["stop", ALIAS], api)
    assert code == 0 and out.startswith(f"stop requested for {live.run_id}")
    assert api.requests[0].url.params["alias"] == ALIAS
    assert api.requests[-1].url.path == f"/runs/{live.run_id}/stop"


def test_an_alias_with_no_live_run_names_the_newest() -> None:
    newest, old = summary(2, RunStatus.STOPPED), summary(0, RunStatus.COMPLETED)
    api = by_alias([newest, old], then=newest)
    assert run(["status", ALIAS], api)[0] == 0
    assert api.requests[-1].url.path == f"/runs/{newest.run_id}"


def test_an_alias_with_two_live_runs_is_ambiguous_and_lists_them() -> None:
    first, second = summary(1, RunStatus.RUNNING), summary(2, RunStatus.PAUSED)
    api = by_alias([second, first, summary(0, RunStatus.COMPLETED)], then=first)
    with pytest.raises(CliError) as raised:
        run(["stop", ALIAS], api)
    message = str(raised.value)
    assert f"alias '{ALIAS}' names 2 unfinished runs" in message
    assert first.run_id in message and second.run_id in message
    assert summary(0, RunStatus.COMPLETED).run_id not in message
    assert all(r.method == "GET" for r in api.requests)  # nothing was stopped


def test_a_word_no_run_has_as_alias_is_taken_as_a_run_id() -> None:
    api = Recorder(
        {
            ("GET", "/runs"): httpx.Response(200, json=[]),
            ("GET", "/runs/my-run/events"): httpx.Response(200, json=[]),
        }
    )
    assert run(["history", "my-run"], api) == (0, "no events for my-run\n")
    assert [r.url.path for r in api.requests] == ["/runs", "/runs/my-run/events"]


def test_trajectory_takes_an_alias() -> None:
    newest = summary(2, RunStatus.COMPLETED)
    line = json.dumps({"run_id": newest.run_id, "step": "hydrate"}) + "\n"
    api = Recorder(
        {
            ("GET", "/runs"): httpx.Response(200, json=wire_list([newest])),
            ("GET", f"/runs/{newest.run_id}/trajectory"): httpx.Response(200, text=line),
        }
    )
    assert run(["trajectory", ALIAS], api) == (0, line)
    assert api.requests[-1].url.path == f"/runs/{newest.run_id}/trajectory"


def workspace(run_id: str, n: int) -> RunWorkspace:
    entries = [WorkspaceEntry(name=f"{run_id}.{i}" if i else run_id, bytes=100) for i in range(n)]
    return RunWorkspace(run_id=run_id, finished=True, entries=entries, bytes=100 * n)


def test_clean_all_asks_once_and_cleans_every_finished_run() -> None:
    done, stopped = summary(1, RunStatus.COMPLETED), summary(2, RunStatus.STOPPED)
    closing = summary(3, RunStatus.FAILED)  # its workflow is still closing
    empty = summary(0, RunStatus.HALTED)
    answers = {
        ("GET", "/runs"): httpx.Response(200, json=wire_list([done, stopped, closing, empty]))
    }
    for run_summary, found in (
        (done, workspace(done.run_id, 2)),
        (stopped, workspace(stopped.run_id, 1)),
    ):
        path = f"/runs/{run_summary.run_id}/workspace"
        answers[("GET", path)] = httpx.Response(200, json=wire(found))
        removed = WorkspaceRemoved(run_id=found.run_id, removed=found.entries, bytes=found.bytes)
        answers[("DELETE", path)] = httpx.Response(200, json=wire(removed))
    answers[("GET", f"/runs/{closing.run_id}/workspace")] = httpx.Response(
        200, json=wire(workspace(closing.run_id, 1).model_copy(update={"finished": False}))
    )
    answers[("GET", f"/runs/{empty.run_id}/workspace")] = httpx.Response(
        200, json=wire(RunWorkspace(run_id=empty.run_id, finished=True, entries=[], bytes=0))
    )
    api = Recorder(answers)

    code, out = run(["clean", "--all"], api, stdin=TtyInput("n\n"))
    assert code == 1 and out.endswith("nothing deleted\n")
    assert not [r for r in api.requests if r.method == "DELETE"]

    code, out = run(["clean", "--all"], api, stdin=TtyInput("y\n"))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:4] == [
        "2 finished run(s) have workspaces on the service (300 bytes):",
        f"  {stopped.run_id}: 1 workspace(s) (100 bytes)",
        f"  {done.run_id}: 2 workspace(s) (200 bytes)",
        "their pushed branches stay on their origins",
    ]
    assert lines[-1].endswith("deleted 3 workspace(s) of 2 run(s), 300 bytes")
    deleted = [r.url.path for r in api.requests if r.method == "DELETE"]
    assert deleted == [f"/runs/{stopped.run_id}/workspace", f"/runs/{done.run_id}/workspace"]
    statuses = {r.url.params.get("status") for r in api.requests if r.url.path == "/runs"}
    assert statuses == {"completed", "failed", "halted", "stopped"}


def test_clean_needs_a_run_or_all() -> None:
    api = Recorder({})
    with pytest.raises(CliError, match="or --all"):
        run(["clean"], api)
    with pytest.raises(CliError, match="not both"):
        run(["clean", RUN_ID, "--all"], api)


def test_new_at_a_terminal_asks_nothing_of_a_run_past_its_confirmation() -> None:
    """An Idempotency-Key's run approved before: nothing to confirm, nothing waited for."""
    created = {"run_id": RUN_ID, "alias": "a", "status_url": f"/runs/{RUN_ID}"}
    running = STATE.model_copy(update={"status": RunStatus.RUNNING, "iteration": 1})
    api = Recorder(
        {
            ("POST", "/runs"): httpx.Response(200, json=created),
            ("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(running)),
        }
    )
    code, out = run(["new", "t", "--idempotency-key", "k"], api, stdin=TtyInput("c\n"))
    assert (code, out) == (0, f"{RUN_ID}\n")
    assert api.body(0)["mode"] == "interactive"
    assert [r.method for r in api.requests] == ["POST", "GET"]


@pytest.mark.parametrize("typed", ["", "x\n"])
def test_the_end_of_input_at_the_question_cancels(typed: str) -> None:
    """Ctrl-D (or input that ends after a wrong answer) is nobody saying yes
    (docs/cli.md#confirm-first): a cancel, never the default approve."""
    console = Console(file=io.StringIO(), force_terminal=False)
    assert confirm.ask(TtyInput(typed), console) == "cancel"


def test_enter_at_the_question_approves() -> None:
    """Enter alone takes the default, approve, as the question says (`(a)`), at once."""
    err = io.StringIO()
    assert confirm.ask(TtyInput("\n"), Console(file=err, force_terminal=False)) == "approve"
    assert err.getvalue().count("Approve, edit or cancel?") == 1
    assert confirm.ask(TtyInput(" e \n"), Console(file=err)) == "edit"
