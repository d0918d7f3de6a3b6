"""The run's proof from the client's side (docs/cli.md, docs/mcp.md): `loops new` and
`loops approve` send `verify` and `allow_unverified`, `loops status` and the confirm-first
draft show the proof, an edit changes it as commands, and the MCP tools pass it on."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import httpx
import pytest
from fastapi.testclient import TestClient
from rich.console import Console
from temporalio.client import Client as TemporalClient

from loopworks.api.main import create_app
from loopworks.cli import confirm
from loopworks.cli.app import build_parser
from loopworks.cli.mcp.views import run_view
from loopworks.cli.steer_render import proof_lines
from loopworks.schemas.proof import ProofResult, ProofSource, ProofStatus, RunProof
from loopworks.schemas.rules import Rule, RuleOwner
from loopworks.schemas.run import Approval, RunStatus
from loopworks.schemas.settings import Settings
from tests.api.fake_temporal import FakeClient
from tests.cli.sample import RUN_ID, STATE, wire
from tests.cli.test_commands import CREATED, Recorder, run
from tests.cli.test_mcp_server import Bridge, call, tools

pytestmark = pytest.mark.unit

TESTS = "python3 -m unittest discover -s tests"
PROOF = RunProof(
    source=ProofSource.DETECTED,
    commands=[TESTS],
    basis="test modules in tests/ (tests/test_calc.py, unittest)",
)
TITLE = Rule(id="has-title", description="A title", check="a heading")
PROOF_RULE = Rule(
    id="proof-1", description="The proof", check="x", phase="B", owner=RuleOwner.ORCHESTRATOR
)
DRAFT = STATE.model_copy(
    update={
        "status": RunStatus.AWAITING_APPROVAL,
        "rules": [TITLE, PROOF_RULE],
        "proof": PROOF,
    }
)


def test_new_sends_the_proof_commands_and_the_permission() -> None:
    api = Recorder({("POST", "/runs"): CREATED})
    run(["new", "t", "--verify", "make test", "--verify", "make lint", "--allow-unverified"], api)
    assert api.body() == {
        "task": "t",
        "verify": ["make test", "make lint"],
        "allow_unverified": True,
    }
    run(["new", "t", "--no-verify"], api)
    assert api.body() == {"task": "t", "verify": []}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["new", "t", "--verify", "x", "--no-verify"])


def test_approve_sets_the_proof_or_leaves_it() -> None:
    answer = httpx.Response(200, json=wire(STATE))
    api = Recorder({("POST", f"/runs/{RUN_ID}/approve"): answer})
    run(["approve", RUN_ID, "--verify", "make check", "--no-allow-unverified"], api)
    assert api.body() == {"verify": ["make check"], "allow_unverified": False}
    run(["approve", RUN_ID], api)
    assert api.body() == {}


def test_status_shows_the_proof_and_each_commands_result() -> None:
    failed = PROOF.model_copy(
        update={
            "status": ProofStatus.FAILED,
            "results": [ProofResult(rule_id="proof-1", command=TESTS, passed=False, exit_code=1)],
        }
    )
    assert proof_lines(STATE.model_copy(update={"proof": failed})) == [
        "proof, detected (test modules in tests/ (tests/test_calc.py, unittest)): failed",
        f"  FAIL {TESTS} (exit code 1)",
    ]
    none = RunProof(source=ProofSource.REQUEST, basis="the request's `verify` is empty")
    assert proof_lines(STATE.model_copy(update={"proof": none})) == [
        "proof: none (the request's `verify` is empty): pending; if the run changes code, it "
        "ends unverified"
    ]
    assert proof_lines(STATE) == []
    api = Recorder({("GET", f"/runs/{RUN_ID}"): httpx.Response(200, json=wire(DRAFT))})
    _, out = run(["status", RUN_ID], api)
    assert f"  not run  {TESTS}" in out.splitlines()


def test_the_draft_shows_the_proof_and_an_edit_changes_it_as_commands() -> None:
    """Confirm first: the proof is shown as the proof, not as a rule; the document edits
    the run's own rules and the proof's commands, and the approval carries what changed."""
    out = io.StringIO()
    confirm.show_run(DRAFT, Console(file=out, width=200))
    shown = out.getvalue()
    assert "has-title" in shown and "proof-1" not in shown
    assert "proof, detected" in shown and TESTS in shown
    document = confirm.run_document(DRAFT)
    assert [rule["id"] for rule in document["rules"]] == ["has-title"]
    assert (document["verify"], document["allow_unverified"]) == ([TESTS], False)
    edited = confirm.edited_approval(
        DRAFT, {**document, "verify": ["make test"]}, Console(file=io.StringIO())
    )
    assert edited == Approval(verify=["make test"])
    shown_after = confirm.applied(DRAFT, edited)
    assert shown_after.proof is not None and shown_after.proof.commands == ["make test"]
    # Handing the proof's rule back as a rule of the run is refused, saying what to do.
    refused = io.StringIO()
    rules = [*document["rules"], confirm.as_data(PROOF_RULE)]
    assert (
        confirm.edited_approval(DRAFT, {**document, "rules": rules}, Console(file=refused)) is None
    )
    assert "give the commands in `verify`" in refused.getvalue()


@pytest.fixture
def bridge(tmp_path: Path) -> Iterator[Bridge]:
    app = create_app(
        Settings(LOOPS_DATA_DIR=tmp_path / "data"), client=cast(TemporalClient, FakeClient())
    )
    with TestClient(app, base_url="http://localhost") as http:
        yield Bridge(http)


async def test_the_mcp_tools_pass_the_proof_and_show_it(bridge: Bridge) -> None:
    async with tools(bridge) as mcp:
        await call(mcp, "start_run", task="Add mul", verify=[TESTS], allow_unverified=True)
        _, _, body = bridge.requests[0]
        assert (body["verify"], body["allow_unverified"]) == ([TESTS], True)
        await call(mcp, "approve_run", run_id=RUN_ID, verify=[], allow_unverified=False)
        _, _, approved = bridge.requests[-1]
        assert approved == {"verify": [], "allow_unverified": False}
    view = run_view(DRAFT)
    assert view.proof is not None
    assert (view.proof.source, view.proof.commands, view.proof.status) == (
        "detected",
        [TESTS],
        "pending",
    )
