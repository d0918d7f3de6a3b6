"""The loop's decisions as plain functions (what follows an evaluation, stagnation, stop
reasons and the distance to success: docs/loop.md).

Nothing here touches Temporal, so every rule is unit-tested on its own and the
workflow reads as a sequence of steps.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from slugify import slugify

from loopworks.schemas.evaluation import CheckResult, DistanceToSuccess, Evaluation, RuleResult
from loopworks.schemas.rules import (
    CheckGroup,
    Phase,
    PreparedCheck,
    Rule,
    RuleOwner,
    Severity,
    group_of,
)
from loopworks.schemas.run import STATUS_FOR_REASON, RunStatus, StopReason, Thresholds

# A failed evaluation that gains less than this is stagnant; this many in a row stop the run
# (docs/loop.md#stagnation).
STAGNATION_DELTA = 0.02
STAGNATION_LIMIT = 2
# Critic REVISE sends the plan back to hydration at most this many times.
MAX_PLAN_REVISIONS = 2
# A task alias keeps this many characters at most, so that a run id
# (`<alias>-<yyyyMMdd-HHmmss>-<6 hex>`) stays short enough to read.
ALIAS_MAX_LENGTH = 40


def active_rules(rules: list[Rule], phase: Phase) -> list[Rule]:
    """Phase A activates A rules; phase B activates A and B (docs/loop.md#phases)."""
    if phase == Phase.A:
        return [rule for rule in rules if rule.phase == Phase.A]
    return list(rules)


def rules_key(rules: list[Rule]) -> str:
    """What PREPARE's checks are made from besides the task: the same active rules (ids,
    texts, checks, phases, in order) give the same key. A run's own rule keeps the key it had
    before rules had owners: a run continued from then finds its checks still prepared."""
    text = json.dumps([_keyed(rule) for rule in rules], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _keyed(rule: Rule) -> dict[str, Any]:
    if rule.owner == RuleOwner.RUN:
        return rule.model_dump(mode="json", exclude={"owner"})
    return rule.model_dump(mode="json")


def group_checks(checks: list[PreparedCheck]) -> list[tuple[CheckGroup, list[PreparedCheck]]]:
    """Checks by the group that runs them (independent groups run in parallel), in a
    fixed order so the workflow schedules them the same way on every replay."""
    groups: dict[CheckGroup, list[PreparedCheck]] = {}
    for check in checks:
        groups.setdefault(group_of(check.check), []).append(check)
    return sorted(groups.items())


def score_results(
    rules: list[Rule], checks: list[CheckResult], phase: Phase, thresholds: Thresholds
) -> Evaluation:
    """Score = weight of passed active rules / weight of all active rules.

    A rule passes only when every prepared check for it passed; an active rule with no
    check result at all fails, so a check that was never run cannot count as a pass.
    Passing needs score >= the phase threshold and no failed `fail` rule.
    """
    outcomes: dict[str, list[CheckResult]] = {}
    for check in checks:
        outcomes.setdefault(check.rule_id, []).append(check)

    results: list[RuleResult] = []
    for rule in active_rules(rules, phase):
        rule_checks = outcomes.get(rule.id, [])
        passed = bool(rule_checks) and all(c.passed for c in rule_checks)
        detail = "; ".join(c.detail for c in rule_checks if c.detail) or (
            "" if rule_checks else "no check was run for this rule"
        )
        results.append(
            RuleResult(
                rule_id=rule.id,
                severity=rule.severity,
                weight=rule.effective_weight,
                passed=passed,
                detail=detail,
                unchecked=any(c.unchecked for c in rule_checks),
            )
        )

    total = sum(r.weight for r in results)
    earned = sum(r.weight for r in results if r.passed)
    # With no weighted rule there is nothing to fall short of.
    score = round(earned / total, 4) if total > 0 else 1.0
    threshold = thresholds.for_phase(phase)
    no_blockers = not any(not r.passed and r.severity == Severity.FAIL for r in results)
    return Evaluation(
        phase=phase,
        threshold=threshold,
        score=score,
        passed=score >= threshold and no_blockers,
        results=results,
    )


class Next(StrEnum):
    """What the loop does after an evaluation."""

    SWITCH_TO_B = "switch_to_b"
    STOP = "stop"
    REFINE = "refine"


@dataclass(frozen=True)
class Decision:
    next: Next
    reason: StopReason | None = None
    stagnation_count: int = 0


def next_stagnation_count(previous: Evaluation | None, current: Evaluation, count: int) -> int:
    """The stagnation counter (docs/loop.md#stagnation).

    An evaluation is stagnant when the score rose by less than 0.02 and no fail blocker of
    the previous one was cleared: a loop that fixes a blocker is progressing even if the
    score barely moves. ("And no fail blocker is left" would never fire: an evaluation
    without one already stops with `no_major_issues`.)
    """
    if previous is None:
        return 0
    # Scores carry four decimals; rounding keeps a step of exactly 0.02 from reading as
    # 0.0199999... in binary floating point.
    delta = round(current.score - previous.score, 4)
    cleared = set(previous.failed_blockers) - set(current.failed_blockers)
    if delta < STAGNATION_DELTA and not cleared:
        return count + 1
    return 0


def decide(
    evaluation: Evaluation,
    previous: Evaluation | None,
    iteration: int,
    max_iterations: int,
    stagnation_count: int,
    proof_pending: bool = False,
) -> Decision:
    """What follows an evaluation, in order: pass → switch or stop; then the stop conditions
    (docs/loop.md#what-follows-an-evaluation). With `proof_pending` (phase A, the run's
    proof among phase B's rules) a run never completes in phase A: where it would stop
    with only warnings left, it switches to phase B, where its proof runs."""
    if evaluation.passed:
        if evaluation.phase == Phase.A:
            return Decision(Next.SWITCH_TO_B, stagnation_count=stagnation_count)
        return Decision(Next.STOP, StopReason.THRESHOLD_REACHED, stagnation_count)
    if not evaluation.failed_blockers:
        if proof_pending and evaluation.phase == Phase.A:
            return Decision(Next.SWITCH_TO_B, stagnation_count=stagnation_count)
        return Decision(Next.STOP, StopReason.NO_MAJOR_ISSUES, stagnation_count)
    count = next_stagnation_count(previous, evaluation, stagnation_count)
    if iteration >= max_iterations:
        return Decision(Next.STOP, StopReason.ITERATION_LIMIT, count)
    if count >= STAGNATION_LIMIT:
        return Decision(Next.STOP, StopReason.STAGNATION, count)
    return Decision(Next.REFINE, stagnation_count=count)


def stop_message(reason: StopReason, evaluation: Evaluation, max_iterations: int) -> str:
    """Why a loop that did not pass stopped, and where it stood: the run's `stop.message`
    and its `stopped` event's."""
    where = f"phase {evaluation.phase.value} scored {evaluation.score} of {evaluation.threshold}"
    blockers = evaluation.failed_blockers
    failing = f", failing {', '.join(blockers)}" if blockers else ""
    if reason == StopReason.ITERATION_LIMIT:
        return f"the iteration limit ({max_iterations}) was reached: {where}{failing}"
    if reason == StopReason.STAGNATION:
        return f"no progress in {STAGNATION_LIMIT} evaluations in a row: {where}{failing}"
    return f"{reason.value}: {where}{failing}"


def is_success(reason: StopReason) -> bool:
    """A stop that completes the run (and so goes to QA first)."""
    return STATUS_FOR_REASON[reason] == RunStatus.COMPLETED


def distance_to_success(evaluation: Evaluation) -> DistanceToSuccess:
    """The block for a run that hit `iteration_limit` without passing
    (docs/loop.md#distance-to-success)."""
    return DistanceToSuccess(
        phase=evaluation.phase,
        threshold=evaluation.threshold,
        score=evaluation.score,
        gap=round(max(0.0, evaluation.threshold - evaluation.score), 4),
        failed_blocker_count=len(evaluation.failed_blockers),
        blocking_rule_ids=evaluation.failed_blockers,
        passed_rules=sum(1 for r in evaluation.results if r.passed),
        total_rules=len(evaluation.results),
    )


def no_skill_loop(reason: StopReason | None, blocked: bool) -> str | None:
    """Why a run that ended so starts no skill sub-loop, None when it may
    (docs/playbook.md#the-skill-sub-loop). Its generator is an agent with every workspace
    tool that no custodiet audits: a halted run does nothing more (its branch gains no
    work), and a run a custodiet block still held when it ended was stopped rather than
    let go on."""
    if reason == StopReason.CRITIC_HALT:
        return "not written: the run halted, and a halted run does nothing more"
    if blocked:
        return "not written: the run ended held by a custodiet block"
    return None


def should_audit(draw: float, probability: float) -> bool:
    """The custodiet audits by chance: `draw` is uniform in [0, 1)."""
    return draw < probability


def alias_for(task: str) -> str:
    """The task alias: a lowercase hyphen slug of 3-40 characters (docs/loop.md#terms).

    python-slugify transliterates to ASCII ("Écrire" gives "ecrire"), keeps only `a-z` and
    `0-9` words joined by single hyphens, and cuts at a word boundary (a first word longer
    than the cap is cut). So the run id made from the alias is a valid Temporal workflow id
    and git ref component (`workspace.refs.checked_run_id`). Slugify leaves an empty or
    short slug as it is; an alias has at least 3 characters, hence the two fallbacks.
    """
    slug = slugify(task, max_length=ALIAS_MAX_LENGTH, word_boundary=True) or "task"
    return slug if len(slug) >= 3 else f"{slug}-loop"
