"""What a person steering a run reads in its state (docs/loop.md#steering-a-run): the
plan, the latest evaluation rule by rule, each reviewer's latest verdict and the gate the
run waits at."""

from __future__ import annotations

import pytest

from loopworks.schemas.detail import Gate
from loopworks.schemas.roles import AuditVerdict, CriticVerdict
from loopworks.schemas.rules import Severity
from loopworks.schemas.run import Approval, RunStatus
from loopworks.workflows.loop import LoopWorkflow
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_audit import BLOCK
from tests.workflows.test_loop import IMPOSSIBLE_RULE, TITLE_RULE, wait_for

pytestmark = pytest.mark.workflow


async def test_the_state_shows_the_plan_the_rules_the_verdicts_and_the_gate(
    harness: LoopHarness,
) -> None:
    async with harness.worker():
        handle = await harness.start(
            task="Write a guide",
            mode="interactive",
            rules=[TITLE_RULE, IMPOSSIBLE_RULE],
            max_iterations=2,
        )

        async def awaiting() -> bool:
            return (await harness.status(handle)).status == RunStatus.AWAITING_APPROVAL

        await wait_for(awaiting)
        waiting = await harness.status(handle)
        assert waiting.gate is not None and waiting.gate.kind == Gate.APPROVAL
        assert waiting.gate.release == f"/runs/{waiting.run_id}/approve"
        assert waiting.gate.since
        assert waiting.verdicts.critic is not None
        assert waiting.verdicts.critic.verdict == CriticVerdict.PROCEED
        assert waiting.plan is None and waiting.evaluation is None

        approved = await handle.execute_update(LoopWorkflow.approve, Approval())
        assert approved.gate is None
        final = (await handle.result()).state

    assert final.gate is None
    assert final.plan is not None and final.plan.iteration == 2
    assert final.plan.focus and final.plan.steps
    evaluation = final.evaluation
    assert evaluation is not None and evaluation.iteration == 2 and not evaluation.passed
    outcomes = {rule.id: (rule.severity, rule.passed) for rule in evaluation.rules}
    assert outcomes == {
        "has-title": (Severity.FAIL, True),
        "impossible": (Severity.FAIL, False),
    }
    assert all(rule.detail for rule in evaluation.rules)
    # The artifact critic spoke after iteration 1's failed evaluation.
    critique = final.verdicts.artifact_critic
    assert critique is not None and critique.iteration == 1
    assert "impossible" in [issue.rule_id for issue in critique.issues]
    assert final.verdicts.custodiet is None  # never audited: probability 0


async def test_a_blocked_run_shows_its_gate_and_the_custodiets_verdict(
    harness: LoopHarness,
) -> None:
    async with harness.worker({"custodiet": {"1": BLOCK}}):
        handle = await harness.start(task="Write a guide", audit_probability=1.0)

        async def blocked() -> bool:
            return (await harness.status(handle)).status == RunStatus.BLOCKED

        await wait_for(blocked)
        state = await harness.status(handle)
        assert state.gate is not None and state.gate.kind == Gate.BLOCK
        assert state.gate.release == f"/runs/{state.run_id}/clear-block"
        audit = state.verdicts.custodiet
        assert audit is not None and audit.verdict == AuditVerdict.BLOCK
        assert audit.reason == BLOCK["reason"] and audit.iteration == 1

        cleared = await handle.execute_update(LoopWorkflow.clear_block, "reviewed")
        assert cleared.gate is None
        final = (await handle.result()).state

    assert final.gate is None
    assert final.verdicts.qa is not None  # it passed, so QA verified it
