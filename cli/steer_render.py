"""`loops status`'s detail under the status line: what a person steering a run decides on
(docs/loop.md#steering-a-run): the gate it waits at, the plan, the latest evaluation rule
by rule and each reviewer's latest verdict. Plain text lines, tested without a terminal."""

from __future__ import annotations

from loopworks.cli.render import score, timestamp
from loopworks.schemas.detail import RELEASES, IssueView
from loopworks.schemas.run import RunState

# A detail or a reason is cut to this many characters on its line; --json has them whole.
LINE_CAP = 100


def _short(text: str, limit: int = LINE_CAP) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _issues(issues: list[IssueView]) -> list[str]:
    return [f"    {issue.rule_id}: {_short(issue.fix or issue.problem)}" for issue in issues]


def prep_lines(state: RunState) -> list[str]:
    """The prep package the run's plan came from, the lines of it skipped, or why it was
    not used (docs/graphs.md#a-single-run-from-a-prep-package)."""
    lines = [f"plan from: {state.prep}"] if state.prep else []
    lines += [f"prep package line skipped: {_short(line)}" for line in state.prep_skipped]
    lines += [f"prep package not used: {_short(reason)}" for reason in state.prep_rejected]
    return lines


def proof_lines(state: RunState) -> list[str]:
    """How the run's work is proven and what the proof showed (docs/loop.md#the-runs-proof);
    nothing for a run recorded before runs had a proof."""
    proof = state.proof
    if proof is None:
        return []
    basis = f" ({_short(proof.basis, 60)})" if proof.basis else ""
    if not proof.commands:
        ending = "it may complete unverified" if proof.allow_unverified else "it ends unverified"
        return [f"proof: none{basis}: {proof.status.value}; if the run changes code, {ending}"]
    lines = [f"proof, {proof.source.value}{basis}: {proof.status.value}"]
    results = {result.command: result for result in proof.results}
    for command in proof.commands:
        result = results.get(command)
        if result is None:
            lines.append(f"  not run  {_short(command)}")
            continue
        mark = "pass" if result.passed else "FAIL"
        ended = "" if result.exit_code is None else f" (exit code {result.exit_code})"
        lines.append(f"  {mark} {_short(command)}{ended}")
    return lines


def detail_lines(state: RunState) -> list[str]:
    lines = prep_lines(state)
    if state.gate is not None:
        command = RELEASES[state.gate.kind][1]
        lines.append(
            f"waits at: {state.gate.kind.value} since {timestamp(state.gate.since)}"
            f" (release: {command} {state.run_id})"
        )
    if state.plan is not None:
        lines.append(f"plan (iteration {state.plan.iteration}): {_short(state.plan.focus)}")
        lines += [f"  {n}. {_short(step)}" for n, step in enumerate(state.plan.steps, 1)]
    if (evaluation := state.evaluation) is not None:
        verdict = "PASS" if evaluation.passed else "FAIL"
        lines.append(
            f"evaluation (iteration {evaluation.iteration}, phase {evaluation.phase.value}):"
            f" score {score(evaluation.score)} / {score(evaluation.threshold)} {verdict}"
        )
        width = max((len(rule.id) for rule in evaluation.rules), default=0)
        for rule in evaluation.rules:
            mark = "pass" if rule.passed else "FAIL"
            line = f"  {mark} {rule.id:<{width}} {rule.severity.value:<4} {_short(rule.detail)}"
            lines.append(line.rstrip())
    lines += proof_lines(state)
    verdicts = state.verdicts
    if verdicts.critic is not None:
        said = verdicts.critic.feedback or "; ".join(verdicts.critic.issues)
        lines.append(
            f"critic: {verdicts.critic.verdict.value}" + (f": {_short(said)}" if said else "")
        )
    if (critique := verdicts.artifact_critic) is not None:
        noun = "issue" if len(critique.issues) == 1 else "issues"
        lines.append(
            f"artifact critic (iteration {critique.iteration}): {len(critique.issues)} {noun}"
        )
        lines += _issues(critique.issues)
    if (audit := verdicts.custodiet) is not None:
        reason = f": {_short(audit.reason)}" if audit.reason else ""
        lines.append(f"custodiet (iteration {audit.iteration}): {audit.verdict.value}{reason}")
    if (qa := verdicts.qa) is not None:
        summary = f": {_short(qa.summary)}" if qa.summary else ""
        lines.append(f"qa (iteration {qa.iteration}): {qa.verdict.value}{summary}")
        lines += _issues(qa.issues)
    return lines
