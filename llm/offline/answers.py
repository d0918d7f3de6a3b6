"""The offline model's default answers, one per role: what it answers a step when nothing
is scripted. They follow the step's inputs, read through the role's context model: a
first draft from the task, checks from the rules, refinements that apply the critique."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from typing import Any

from loopworks.llm.offline.curation import CURATION_DEFAULTS, playbook_tags
from loopworks.schemas.contexts import (
    CONTEXTS,
    ArtifactCriticContext,
    CriticContext,
    CustodietContext,
    EvaluatorContext,
    HydratorContext,
    PlannerContext,
    PreparerContext,
    ProducerContext,
    QAVerifierContext,
    RefinerContext,
    ReflectorContext,
    TaskPlannerContext,
)
from loopworks.schemas.roles import Role
from loopworks.schemas.rules import PatternCheck, Severity
from loopworks.schemas.run import StopReason
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.schemas.tasks import MAX_EXISTING_FILES

# What the offline QA verifier runs when the run has no proof: its deliverable is there.
QA_CHECK = f"test -s {ARTIFACT_PATH}"


def draft_files(answer: dict[str, Any]) -> list[dict[str, str]]:
    """The well-formed `{path, content}` entries of a draft; a script may give others."""
    files = answer.get("files")
    return [
        {"path": f["path"], "content": f["content"]}
        for f in (files if isinstance(files, list) else [])
        if isinstance(f, dict)
        and isinstance(f.get("path"), str)
        and isinstance(f.get("content"), str)
    ]


def closing_line(answer: dict[str, Any]) -> str:
    summary = str(answer.get("summary") or "").strip()
    changed = [str(c) for c in answer.get("changed") or []]
    if changed:
        return f"{summary or 'Done'}: {'; '.join(changed)}"
    return summary or "No changes were needed."


def default_answer(role: Role, context: dict[str, Any]) -> dict[str, Any]:
    """What the offline model answers `role` for a step's `context` when nothing is
    scripted: a structured role's answer, or for an agent the draft it writes.

    The context is read through the role's context model, as the activity built it: a
    key missing, renamed or unknown is a ValidationError here, not a quiet default.
    """
    return _DEFAULTS[role](CONTEXTS[role].model_validate(context))


# --- default answers, one per role ------------------------------------------------------


def _hydrate(ctx: HydratorContext) -> dict[str, Any]:
    task = ctx.task
    template = ctx.template or ctx.suggested_template or "minor-edit"
    steps = ctx.template_steps or ["Understand the task", "Produce", "Verify"]
    rules = [r.model_dump(mode="json") for r in ctx.user_rules] or _draft_rules(task)
    plan = [*steps]
    if ctx.feedback:
        plan.append("Address the critic's feedback: " + "; ".join(ctx.feedback))
    return {
        "template": template,
        "intent": f"Produce a written result for: {task.strip()[:200]}",
        "plan": plan,
        "acceptance_criteria": [
            "The artifact has a title and a summary of the result",
            f"The artifact addresses the task ({_keyword(task)})",
            "The artifact says how the result can be verified",
        ],
        "rules": rules,
    }


def _keyword(task: str) -> str:
    words = sorted(re.findall(r"[A-Za-z]{4,}", task), key=len, reverse=True)
    return words[0].lower() if words else "task"


def _draft_rules(task: str) -> list[dict[str, Any]]:
    keyword = _keyword(task)
    return [
        {
            "id": "has-title",
            "description": "The artifact starts with a level-1 title",
            "severity": "fail",
            "phase": "A",
            "check": {"kind": "pattern", "pattern": r"^# \S", "example": "# Result"},
        },
        {
            "id": "covers-task",
            "description": f"The artifact mentions the task's subject ({keyword})",
            "severity": "fail",
            "phase": "A",
            "check": {
                "kind": "pattern",
                "pattern": f"(?i){re.escape(keyword)}",
                "example": f"This addresses {keyword}.",
            },
        },
        {
            "id": "has-summary",
            "description": "The artifact has a Summary section",
            "severity": "warn",
            "phase": "A",
            "check": {"kind": "pattern", "pattern": r"^## Summary", "example": "## Summary"},
        },
        {
            "id": "not-empty",
            "description": "The artifact file exists and is not empty",
            "severity": "warn",
            "phase": "A",
            "check": {"kind": "command", "command": f"test -s {ARTIFACT_PATH}"},
        },
        {
            "id": "has-verification",
            "description": "The artifact says how to verify the result",
            "severity": "fail",
            "phase": "B",
            "check": {
                "kind": "pattern",
                "pattern": r"^## Verification",
                "example": "## Verification\n\nCheck each acceptance criterion against the text.",
            },
        },
        {
            "id": "no-placeholders",
            "description": "No TODO or TBD placeholders remain",
            "severity": "warn",
            "phase": "B",
            "check": {"kind": "pattern", "pattern": r"\b(TODO|TBD)\b", "must_match": False},
        },
        {
            "id": "coherent",
            "description": "The artifact reads as one coherent answer to the task",
            "severity": "info",
            "phase": "B",
            "check": "Is the artifact a coherent answer to the task?",
        },
    ]


def _review(ctx: CriticContext) -> dict[str, Any]:
    return {"verdict": "PROCEED", "issues": [], "feedback": "The plan covers the task."}


def _plan(ctx: PlannerContext) -> dict[str, Any]:
    last = ctx.last_evaluation
    if not last:
        return {"focus": "first complete draft", "steps": ["Draft every section of the plan"]}
    failed = [r.rule_id for r in last.results if not r.passed]
    return {
        "focus": "fix " + (", ".join(failed) or "remaining warnings"),
        "steps": [f"Make rule {rule} pass" for rule in failed] or ["Polish the artifact"],
    }


def _produce(ctx: ProducerContext) -> dict[str, Any]:
    current = ctx.current_artifact
    if current:
        # The refined artifact stands; the producer keeps it rather than start over.
        return {"files": [{"path": ARTIFACT_PATH, "content": current}], "changed": []}
    task = ctx.task.strip()
    lines = [
        f"# {task.splitlines()[0][:80]}",
        "",
        "## Summary",
        "",
        f"{ctx.intent or task}",
        "",
        "## Approach",
        "",
        *[f"- {step}" for step in ctx.plan.steps],
        "",
        "## Acceptance criteria",
        "",
        *[f"- {criterion}" for criterion in ctx.acceptance_criteria],
        "",
    ]
    return {
        "files": [{"path": ARTIFACT_PATH, "content": "\n".join(lines)}],
        "changed": ["initial generation"],
        "summary": "first draft",
    }


def _prepare(ctx: PreparerContext) -> dict[str, Any]:
    checks = []
    for rule in ctx.rules:
        check = (
            {"kind": "llm", "question": rule.check}
            if isinstance(rule.check, str)
            else rule.check.model_dump(mode="json")
        )
        checks.append({"rule_id": rule.id, "check": check})
    return {"checks": checks}


def _judge(ctx: EvaluatorContext) -> dict[str, Any]:
    artifact = ctx.artifact.strip()
    passed = bool(artifact)
    reason = "the artifact is present and on topic" if passed else "the artifact is empty"
    return {question.rule_id: {"passed": passed, "reason": reason} for question in ctx.questions}


def _critique(ctx: ArtifactCriticContext) -> dict[str, Any]:
    rules = {rule.id: rule for rule in ctx.rules}
    issues = []
    failed = [r for r in ctx.evaluation.results if not r.passed]
    for result in failed:
        rule = rules.get(result.rule_id)
        example = rule.check.example if rule and isinstance(rule.check, PatternCheck) else None
        issues.append(
            {
                "rule_id": result.rule_id,
                "problem": result.detail or f"rule {result.rule_id} failed",
                "fix": f"Make the artifact satisfy: {rule.description if rule else result.rule_id}",
                "suggested_text": example,
            }
        )
    if not issues:
        issues.append({"rule_id": "-", "problem": "no failed rule", "fix": "no change needed"})
    return {"issues": issues}


def _refine(ctx: RefinerContext) -> dict[str, Any]:
    artifact = ctx.current_artifact or ""
    changed = []
    for issue in ctx.critique.issues:
        text = issue.suggested_text
        if text and text not in artifact:
            artifact = artifact.rstrip("\n") + "\n\n" + text.strip() + "\n"
            changed.append(text.strip().splitlines()[0])
    return {
        "files": [{"path": ARTIFACT_PATH, "content": artifact}],
        "changed": changed,
        "summary": f"applied {len(changed)} fix(es)",
    }


def _audit(ctx: CustodietContext) -> dict[str, Any]:
    return {"verdict": "OK", "reason": "work stays within the task's scope", "violations": []}


def _qa(ctx: QAVerifierContext) -> dict[str, Any]:
    """ISSUES while a blocking rule fails; else VERIFIED, citing what it runs first (the
    offline model runs an answer's `evidence` before it answers: llm/offline/model.py): the
    run's proof, else a check that the deliverable is there."""
    results = ctx.evaluation.results if ctx.evaluation else []
    blockers = [r for r in results if not r.passed and r.severity == Severity.FAIL]
    if blockers:
        return {
            "verdict": "ISSUES",
            "issues": [
                {"rule_id": r.rule_id, "problem": r.detail or "failed", "fix": "fix it"}
                for r in blockers
            ],
            "summary": "blocking rules still fail",
        }
    commands = ctx.proof.commands if ctx.proof and ctx.proof.commands else [QA_CHECK]
    return {
        "verdict": "VERIFIED",
        "issues": [],
        "summary": "acceptance criteria are met: " + ", ".join(f"`{c}` passed" for c in commands),
        "evidence": commands,
    }


def qa_failed(answer: dict[str, Any], failed: dict[str, str]) -> dict[str, Any]:
    """The default QA answer once the commands it cites have run: ISSUES when one failed
    (`failed`: each failed command's output), as a verifier reads its own results."""
    if not failed:
        return answer
    return {
        "verdict": "ISSUES",
        "issues": [
            {"rule_id": "qa", "problem": f"`{command}` failed: {output[:500]}", "fix": "fix it"}
            for command, output in failed.items()
        ],
        "summary": "the commands that prove the work fail: "
        + ", ".join(f"`{command}`" for command in failed),
        "evidence": [],
    }


def _reflect(ctx: ReflectorContext) -> dict[str, Any]:
    # The stop reason's value, as the text below has always quoted it (None without one).
    reason = ctx.stop_reason.value if ctx.stop_reason else None
    score = ctx.last_score
    if ctx.stop_reason in (StopReason.THRESHOLD_REACHED, StopReason.NO_MAJOR_ISSUES):
        outcome = "success"
    else:
        outcome = "partial" if score > 0 else "failure"
    return {
        "outcome": outcome,
        "followed": "Yes - hydration, critic review and the evaluation loop ran as planned",
        "accomplishment": f"artifact scored {score} ({reason})",
        "root_cause": None if outcome == "success" else f"run ended with {reason}",
        "proposed_change": "none needed" if outcome == "success" else "review the rules",
        "summary": f"Run ended with {reason} after {ctx.iteration} iteration(s)",
        "accomplishments": [f"scored {score}"],
        "friction_points": [] if outcome == "success" else [str(reason)],
        "proposed_changes": [],
        "playbook_tags": playbook_tags(ctx.playbook_items, outcome),
    }


def _plan_tasks(ctx: TaskPlannerContext) -> dict[str, Any]:
    """A small valid graph for the goal: a survey the other tasks require, then two drafts
    that run side by side; a long goal gets a diamond, a last task requiring both drafts.

    Each task asks for a markdown document titled with the task's title, and its
    verification command looks for that title in the repository's markdown files. That
    is what an offline loop leaves: its producer writes the child's task (title first)
    as the artifact's heading and summary. The command runs twice, as the task loop's
    one rule (the artifact at the workspace root) and on the integration branch after
    the merge (the artifact moved under the task's own directory): searching every
    markdown file passes in both, where a fixed path passes in one only. It cannot pass
    before the task's loop has run (the task file holding the title is JSON), and titles
    differ in their first word, so one task's document never passes another's check.
    """
    subject = _subject(ctx.goal)
    long_goal = len(ctx.goal) > 160 or len(re.findall(r"[.!?](?:\s|$)", ctx.goal.strip())) > 1
    named = _named_files(ctx.goal, ctx.files)
    survey = _task(
        "T-001",
        f"Survey: {subject}",
        "what the goal needs and where in the repository it applies",
        files=named,
    )
    if long_goal:
        drafts = [
            _task("T-002", f"Draft part one: {subject}", "the first half of the goal", ["T-001"]),
            _task("T-003", f"Draft part two: {subject}", "the second half of the goal", ["T-001"]),
        ]
        last = _task(
            "T-004",
            f"Combine: {subject}",
            "how the two parts together meet the goal",
            ["T-002", "T-003"],
        )
        tasks = [survey, *drafts, last]
    else:
        tasks = [
            survey,
            _task("T-002", f"Draft: {subject}", "a first answer to the goal", ["T-001"]),
            _task("T-003", f"Checks: {subject}", "how to check the goal is met", ["T-001"]),
        ]
    for task in tasks[1:]:
        task["context"]["docs"] = list(named)
    return {"tasks": tasks}


def _subject(goal: str) -> str:
    """The goal's first sentence on one line, cut at a word within 50 characters."""
    text = " ".join(goal.split())
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if len(first) > 50:
        first = first[:51].rsplit(" ", 1)[0] if " " in first[:51] else first[:50]
    return first.rstrip(" .,;:!?") or "the goal"


def _named_files(goal: str, files: Sequence[str]) -> list[str]:
    """Up to MAX_EXISTING_FILES of the listed files the goal names (by path, or by a file
    name with an extension); the top-level README when it names none."""
    text = goal.lower()

    def named(path: str) -> bool:
        name = path.rsplit("/", 1)[-1].lower()
        words = [path.lower(), *([name] if "." in name.strip(".") else [])]
        return any(re.search(rf"(?<![\w/.-]){re.escape(w)}(?![\w/-])", text) for w in words)

    found = [path for path in files if named(path)]
    if not found:
        found = [path for path in files if path.lower() == "readme.md"]
    return found[:MAX_EXISTING_FILES]


def _task(
    task_id: str, title: str, topic: str, requires: Sequence[str] = (), files: Sequence[str] = ()
) -> dict[str, Any]:
    return {
        "id": task_id,
        "title": title,
        "description": f"Write a markdown document titled {title!r} that sets out {topic}.",
        "requires": list(requires),
        "context": {"files": list(files), "docs": [], "skills": []},
        "acceptance_criteria": [
            f"A markdown file of the repository holds the title {title!r}",
            f"The document sets out {topic}",
        ],
        "verification_command": f"grep -rqF --include='*.md' -e {shlex.quote(title)} .",
    }


# Each takes its role's context model, `CONTEXTS[role]`, which `default_answer` validates:
# a mapping cannot say that per key, so the argument is `Any` here.
_DEFAULTS: dict[Role, Callable[[Any], dict[str, Any]]] = {
    Role.HYDRATOR: _hydrate,
    Role.CRITIC: _review,
    Role.PLANNER: _plan,
    Role.PRODUCER: _produce,
    Role.PREPARER: _prepare,
    Role.EVALUATOR: _judge,
    Role.ARTIFACT_CRITIC: _critique,
    Role.REFINER: _refine,
    Role.CUSTODIET: _audit,
    Role.QA_VERIFIER: _qa,
    Role.REFLECTOR: _reflect,
    Role.TASK_PLANNER: _plan_tasks,
    **CURATION_DEFAULTS,
}
