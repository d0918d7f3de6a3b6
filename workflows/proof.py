"""The run's proof as plain functions (docs/loop.md#the-runs-proof): where it comes from,
the rules it becomes, what its results say, and whether a run may complete without one.

No Temporal here: the workflow calls these and every rule is unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from loopworks.schemas.evaluation import CheckResult
from loopworks.schemas.proof import (
    CHANGED_SHOWN,
    PROOF_DETAIL_CAP,
    PROOF_FILE,
    PROOF_TIMEOUT_SECONDS,
    ProofFound,
    ProofResult,
    ProofSource,
    ProofStatus,
    RunProof,
    proof_rule_id,
)
from loopworks.schemas.rules import CommandCheck, Phase, PreparedCheck, Rule, RuleOwner, Severity
from loopworks.schemas.run import StopReason

UNVERIFIED_MESSAGE = (
    "the run changed code ({paths}) and nothing proves it: give `verify` commands, declare "
    f"them in `{PROOF_FILE}`, or allow an unverified run (`allow_unverified`)"
)


def planned(verify: list[str] | None, found: ProofFound | None, allow_unverified: bool) -> RunProof:
    """The run's proof, first found first: the request's `verify` (even `[]`), else the
    repository's `.loops/verify`, else what its files plainly use, else none."""
    if verify is not None:
        basis = "the request's `verify`" if verify else "the request's `verify` is empty"
        return RunProof(
            source=ProofSource.REQUEST,
            commands=list(verify),
            basis=basis,
            allow_unverified=allow_unverified,
        )
    if found is not None and found.declared is not None:
        basis = f"`{PROOF_FILE}` on the base branch"
        if not found.declared:
            basis += " declares no command"
        return RunProof(
            source=ProofSource.REPOSITORY,
            commands=found.declared,
            basis=basis,
            allow_unverified=allow_unverified,
        )
    if found is not None and found.detected:
        return RunProof(
            source=ProofSource.DETECTED,
            commands=found.detected,
            basis=found.basis,
            allow_unverified=allow_unverified,
        )
    return RunProof(
        source=ProofSource.NONE,
        basis="the repository declares no proof and no test setup was found",
        allow_unverified=allow_unverified,
    )


def edited(proof: RunProof, verify: list[str] | None, allow_unverified: bool | None) -> RunProof:
    """The proof after a person's approval: `verify` replaces the commands (its source the
    person's), `allow_unverified` the permission; what is not given stays."""
    update: dict[str, object] = {}
    if verify is not None and verify != proof.commands:
        basis = "set at approval" if verify else "set at approval: none"
        update |= {"source": ProofSource.REQUEST, "commands": list(verify), "basis": basis}
        update |= {"status": ProofStatus.PENDING, "results": [], "commit": ""}
    if allow_unverified is not None:
        update["allow_unverified"] = allow_unverified
    return proof.model_copy(update=update)


def proof_rules(proof: RunProof) -> list[Rule]:
    """One `fail` rule of phase B a command, owned by the orchestrator: the loop works until
    each exits 0 on the work, and no model may change, drop or answer it."""
    return [
        Rule(
            id=proof_rule_id(n),
            description=f"The run's proof `{command}` exits 0 on the work the run pushes",
            severity=Severity.FAIL,
            phase=Phase.B,
            owner=RuleOwner.ORCHESTRATOR,
            check=CommandCheck(command=command, timeout_seconds=PROOF_TIMEOUT_SECONDS),
        )
        for n, command in enumerate(proof.commands, start=1)
    ]


def with_proof(rules: Sequence[Rule], proof: RunProof | None) -> list[Rule]:
    """`rules` (a hydration's, an approval's, the run's) with the run's proof rules as the
    proof says now, whatever they held: every rule that claims the orchestrator (an earlier
    proof's, or a model's pretence) is dropped, and so is one named as a proof rule (it
    would stand for the proof). A run without a proof (one recorded before runs had one)
    keeps its rules as they are."""
    if proof is None:
        return list(rules)
    own = proof_rules(proof)
    ids = {rule.id for rule in own}
    kept = [rule for rule in rules if rule.owner == RuleOwner.RUN and rule.id not in ids]
    return [*kept, *own]


def orchestrator_rules(rules: Sequence[Rule]) -> list[str]:
    return [rule.id for rule in rules if rule.owner == RuleOwner.ORCHESTRATOR]


def pending(rules: Sequence[Rule], phase: Phase) -> bool:
    """Whether the run's proof has yet to run in this phase: its rules are phase B's, so a
    stop that would complete the run in phase A switches to phase B first."""
    return phase == Phase.A and any(
        rule.owner == RuleOwner.ORCHESTRATOR and rule.phase == Phase.B for rule in rules
    )


def evaluated(
    proof: RunProof,
    checked: Sequence[tuple[PreparedCheck, CheckResult]],
    code_changed: list[str] | None,
    commit: str,
    iteration: int,
) -> RunProof:
    """The proof after an evaluation of `commit`: its commands' results there, and its
    status. Unchanged when the evaluation ran none of them (phase A)."""
    commands = {proof_rule_id(n): c for n, c in enumerate(proof.commands, start=1)}
    results = [
        ProofResult(
            rule_id=result.rule_id,
            command=commands[result.rule_id],
            passed=result.passed,
            exit_code=result.exit_code,
            detail=_tail(result.detail),
            iteration=iteration,
        )
        for _, result in checked
        if result.rule_id in commands
    ]
    if not results:
        return proof
    status = _status(proof, results, code_changed, commit)
    update: dict[str, object] = {"results": results, "status": status, "commit": commit}
    if code_changed is not None:
        update["changed_code"] = code_changed[:CHANGED_SHOWN]
    return proof.model_copy(update=update)


def _status(
    proof: RunProof, results: list[ProofResult], code_changed: list[str] | None, commit: str
) -> ProofStatus:
    """A failed command fails the proof; passing, it proved code, or there was none to
    prove. Results reused on a commit evaluated before keep what was found there."""
    if not all(r.passed for r in results):
        return ProofStatus.FAILED
    if code_changed == []:
        return ProofStatus.NOT_NEEDED
    if code_changed is None and proof.commit == commit and proof.status == ProofStatus.NOT_NEEDED:
        return ProofStatus.NOT_NEEDED
    return ProofStatus.PASSED


def failures(proof: RunProof | None) -> list[str]:
    """The proof's commands that failed in the latest evaluation, of the work QA verifies
    (what contradicts a VERIFIED of it)."""
    if proof is None:
        return []
    return [f"`{r.command}` ({_ended(r)})" for r in proof.results if not r.passed]


def completed(
    proof: RunProof | None, reason: StopReason, code_changed: list[str] | None
) -> tuple[StopReason, str, RunProof | None]:
    """How a run that QA verified ends: with the reason that sent it to QA, or
    `unverified` when it changed code, nothing proves it, and its request does not allow
    that. `code_changed` None (the change could not be read) counts as changed. The proof
    comes back with its final status."""
    if proof is None:
        return reason, "", None
    changed = code_changed is None or bool(code_changed)
    if proof.commands:
        return reason, "", proof
    if not changed:
        return reason, "", proof.model_copy(update={"status": ProofStatus.NOT_NEEDED})
    shown = code_changed[:CHANGED_SHOWN] if code_changed else []
    final = proof.model_copy(update={"status": ProofStatus.UNVERIFIED, "changed_code": shown})
    if proof.allow_unverified:
        return reason, "", final
    paths = ", ".join(shown[:5]) + (" ..." if len(shown) > 5 else "") if shown else "unread"
    return StopReason.UNVERIFIED, UNVERIFIED_MESSAGE.format(paths=paths), final


def _tail(detail: str) -> str:
    """A result's exit line and the end of its output, where test runners report."""
    if len(detail) <= PROOF_DETAIL_CAP:
        return detail
    head, _, rest = detail.partition("\n")
    return f"{head}\n…{rest[-(PROOF_DETAIL_CAP - len(head) - 2) :]}"


def _ended(result: ProofResult) -> str:
    if result.exit_code is not None:
        return f"exit code {result.exit_code}"
    return result.detail.partition("\n")[0] or "no exit code"
