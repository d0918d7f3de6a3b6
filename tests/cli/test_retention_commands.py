"""`loops gc`, `loops pin`, `loops unpin` against a fake API (answers built from the
models the API serves): what each sends, what it prints, when `gc` asks and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.cli.client import CliError
from loopworks.schemas.retention import (
    ExpiredRun,
    GcReport,
    KeptBecause,
    OriginReport,
    PinState,
    RetentionPolicy,
    Totals,
)
from tests.cli.test_commands import TtyInput, run

pytestmark = pytest.mark.unit

RUN = "write-a-guide-20260101-120000-abc123"
POLICY = RetentionPolicy(days=30)


def _report(dry_run: bool, runs: int = 1, policy: RetentionPolicy = POLICY) -> GcReport:
    expired = [
        ExpiredRun(
            run_id=RUN,
            reason="finished 31.0 days ago (LOOPS_RETENTION_DAYS=30)",
            work_ref=True,
            call_refs=14,
            branch=False,
            clones=[RUN, f"{RUN}.eval-1"],
            clone_bytes=3_100_000,
        )
    ][:runs]
    totals = Totals(
        runs=runs, work_refs=runs, call_refs=14 * runs, clones=2 * runs, clone_bytes=3_100_000
    )
    origin = OriginReport(
        origin="/srv/app.git",
        totals=totals,
        expired=expired,
        kept={KeptBecause.OPEN: 2, KeptBecause.PINNED: 1},
        pinned=["kept-20251201-090000-def456"],
    )
    return GcReport(dry_run=dry_run, policy=policy, origins=[origin], totals=totals)


class GcApi:
    def __init__(self, runs: int = 1, policy: RetentionPolicy = POLICY) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.runs, self.policy = runs, policy

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("POST", "/gc")
        body = json.loads(request.content)
        self.bodies.append(body)
        report = _report(body["dry_run"], self.runs, self.policy)
        return httpx.Response(200, json=json.loads(report.model_dump_json()))


def test_a_dry_run_prints_what_would_go_and_removes_nothing() -> None:
    api = GcApi()
    code, out = run(["gc", "--dry-run"], api)
    assert code == 0
    assert api.bodies == [{"dry_run": True}]
    assert "retention: records expire 30 days after a run finished; result branches stay" in out
    assert f"  {RUN}: work ref, 14 call refs, 2 clone(s), 3.1 MB (finished 31.0 days" in out
    assert "  kept: 2 open, 1 pinned" in out
    assert "  pinned: kept-20251201-090000-def456" in out
    assert "would remove: the records of 1 run(s): 1 work ref(s), 14 call ref(s)" in out


def test_gc_asks_then_removes() -> None:
    api = GcApi()
    code, out = run(["gc", "--branches"], api, stdin=TtyInput("y\n"))
    assert code == 0, out
    assert api.bodies == [
        {"dry_run": True, "branches": True},
        {"dry_run": False, "branches": True},
    ]
    assert "removed: the records of 1 run(s)" in out


def test_gc_answered_no_removes_nothing() -> None:
    api = GcApi()
    code, out = run(["gc"], api, stdin=TtyInput("n\n"))
    assert code == 1 and "nothing removed" in out
    assert [body["dry_run"] for body in api.bodies] == [True]


def test_gc_without_a_terminal_refuses_unless_yes() -> None:
    api = GcApi()
    with pytest.raises(CliError, match="pass --yes"):
        run(["gc"], api)
    assert [body["dry_run"] for body in api.bodies] == [True]
    code, _ = run(["gc", "--yes"], api)
    assert code == 0
    assert [body["dry_run"] for body in api.bodies] == [True, True, False]


def test_gc_with_nothing_expired_or_no_policy_asks_nothing() -> None:
    api = GcApi(runs=0)
    code, out = run(["gc"], api)
    assert code == 0 and len(api.bodies) == 1
    assert "would remove: the records of 0 run(s)" in out
    off = GcApi(runs=0, policy=RetentionPolicy())
    code, out = run(["gc", "--dry-run"], off)
    assert code == 0
    assert "retention is off on the workers" in out and "would remove" not in out


def test_gc_json_prints_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    api = GcApi()
    code, out = run(["gc", "--dry-run", "--json", "--repo", "app.git"], api)
    assert code == 0
    assert api.bodies == [{"dry_run": True, "repo": str(tmp_path / "app.git")}]
    assert GcReport.model_validate_json(out).origins[0].expired[0].run_id == RUN


@pytest.mark.parametrize(("action", "pinned"), [("pin", True), ("unpin", False)])
def test_pin_and_unpin(action: str, pinned: bool) -> None:
    sent: list[tuple[str, Any]] = []

    def api(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, json.loads(request.content)))
        state = PinState(
            run_id=RUN, pinned=pinned, origin="/srv/app.git", ref=f"refs/loopworks/_pins/{RUN}/_"
        )
        return httpx.Response(200, json=state.model_dump())

    code, out = run([action, RUN], api, stdin=io.StringIO())
    assert code == 0
    assert sent == [(f"/runs/{RUN}/{action}", {})]
    if pinned:
        assert f"{RUN} is pinned on /srv/app.git" in out
    else:
        assert f"{RUN} is not pinned" in out
