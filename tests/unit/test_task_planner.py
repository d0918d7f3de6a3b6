"""The task planner (docs/graphs.md#from-a-goal-to-tasks): the offline model's default graph,
and the `plan_graph` step that sends an invalid graph back once with the validator's errors,
then fails."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.models.function import FunctionModel
from temporalio.exceptions import ApplicationError

from loopworks.activities.deps import StepDeps
from loopworks.activities.planning import PlanningActivities
from loopworks.llm.base import ModelCall
from loopworks.llm.offline.answers import default_answer
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.prompts.catalog import load_agents, load_templates
from loopworks.schemas.contexts import (
    TASK_PLANNER_FILES_CAP,
    HydratorContext,
    ProducerContext,
    TaskPlannerContext,
)
from loopworks.schemas.roles import Hydration, IterationPlan, Role, TaskPlan
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import ARTIFACT_PATH, INVALID_OUTPUT, PlanGraphInput
from loopworks.schemas.tasks import MAX_EXISTING_FILES, Task, graph_errors, validated_graph
from loopworks.workspace.git import GitWorkspaces

pytestmark = pytest.mark.unit

FILES = ["README.md", "billing/db.py", "billing/models.py", "docs/ops.md"]
SHORT = "Add a health check to billing/db.py"
LONG = (
    "Write a migration guide for upgrading the billing service to Postgres 16. "
    "It covers the rollback, and the checks to run before and after."
)


def offline_plan(goal: str, files: list[str] = FILES) -> list[Task]:
    context = TaskPlannerContext.listing(goal, files)
    return TaskPlan.model_validate(
        default_answer(Role.TASK_PLANNER, context.model_dump(mode="json"))
    ).tasks


# --- the offline default --------------------------------------------------------------------


def test_offline_plan_is_a_valid_graph_whose_drafts_run_side_by_side() -> None:
    tasks = validated_graph(offline_plan(SHORT), existing_files=FILES)
    assert [(t.id, t.requires) for t in tasks] == [
        ("T-001", []),
        ("T-002", ["T-001"]),
        ("T-003", ["T-001"]),
    ]
    # The goal names billing/db.py: the survey takes it, the others read it. T-002 and
    # T-003 share no file, so nothing keeps them from running at the same time.
    assert tasks[0].context.files == ["billing/db.py"]
    assert [t.context.files for t in tasks[1:]] == [[], []]
    assert all(t.context.docs == ["billing/db.py"] for t in tasks[1:])


def test_offline_plan_for_a_long_goal_is_a_diamond() -> None:
    tasks = validated_graph(offline_plan(LONG), existing_files=FILES)
    assert [(t.id, t.requires) for t in tasks] == [
        ("T-001", []),
        ("T-002", ["T-001"]),
        ("T-003", ["T-001"]),
        ("T-004", ["T-002", "T-003"]),
    ]
    # No file named: the survey reads the top-level README.
    assert tasks[0].context.files == ["README.md"]
    assert offline_plan(LONG, files=[])[0].context.files == []


def test_offline_plan_keeps_within_the_atomic_rule() -> None:
    goal = "Rename the table in " + ", ".join(FILES)
    tasks = validated_graph(offline_plan(goal), existing_files=FILES)
    assert len(tasks[0].context.files) == MAX_EXISTING_FILES


def offline_artifact(task_text: str) -> str:
    """What an offline loop leaves for a child task: the offline hydrator's intent, then
    the offline producer's first draft."""
    templates = load_templates()
    hydrator = HydratorContext(
        task=task_text,
        suggested_template="minor-edit",
        template_steps=[s.name for s in templates["minor-edit"].steps],
        templates={t.id: t.title for t in templates.values()},
        user_rules=[],
        feedback=[],
    )
    hydration = Hydration.model_validate(
        default_answer(Role.HYDRATOR, hydrator.model_dump(mode="json"))
    )
    producer = ProducerContext(
        task=task_text,
        intent=hydration.intent,
        acceptance_criteria=hydration.acceptance_criteria,
        rules=hydration.rules,
        plan=IterationPlan(focus="first complete draft", steps=["Draft it"]),
    )
    [file] = default_answer(Role.PRODUCER, producer.model_dump(mode="json"))["files"]
    return str(file["content"])


def verify(task: Task, root: Path) -> int:
    return subprocess.run(
        ["bash", "-c", task.verification_command], cwd=root, check=False
    ).returncode


@pytest.mark.parametrize("goal", [SHORT, LONG, "Explain 'quotes' and $HOME; rm -rf /"])
@pytest.mark.parametrize(
    "child_task",
    [
        # As the graph words a child loop's task (workflows/graph/inputs.py), and others.
        lambda task: (
            f"{task.title}\n\n{task.description}\n\nFiles: {', '.join(task.context.files)}"
            f"\n\nDone when `{task.verification_command}` exits 0 in the repository root."
        ),
        lambda task: f"{task.id}: {task.title}\n\n{task.description}",
        lambda task: task.description,
    ],
    ids=["as-the-graph-words-it", "id-and-title", "description-only"],
)
def test_offline_verification_commands_pass_only_once_their_task_is_merged(
    goal: str, child_task: Any, tmp_path: Path
) -> None:
    """Each command fails before its task's offline loop has run (the task files, which
    hold the title, are JSON), passes in the loop's workspace (the loop's one rule, the
    artifact at the root) and on the integration branch once merged (the artifact moved
    under the task's directory); another task's document does not pass it."""
    tasks = offline_plan(goal)
    tree = tmp_path / "integration"
    (tree / "docs" / "tasks").mkdir(parents=True)
    (tree / "README.md").write_text("# Billing\n")
    for task in tasks:
        (tree / "docs" / "tasks" / f"{task.id}.json").write_text(task.model_dump_json())
    for merged, task in enumerate(tasks):
        assert verify(task, tree) != 0, task.verification_command
        artifact = offline_artifact(child_task(task))
        workspace = shutil.copytree(tree, tmp_path / task.id)
        (workspace / ARTIFACT_PATH).write_text(artifact)
        assert verify(task, workspace) == 0, task.verification_command
        moved = tree / "docs" / "tasks" / task.id / ARTIFACT_PATH
        moved.parent.mkdir()
        moved.write_text(artifact)
        assert verify(task, tree) == 0, task.verification_command
        # Every task merged so far still passes; those still to come do not.
        assert [verify(t, tree) == 0 for t in tasks] == [n <= merged for n in range(len(tasks))]


# --- plan_graph ---------------------------------------------------------------------------


def task(task_id: str, *requires: str, files: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": task_id,
        "title": f"Task {task_id}",
        "description": f"Do {task_id}",
        "requires": list(requires),
        "context": {"files": files or [], "docs": [], "skills": []},
        "acceptance_criteria": [f"{task_id} is done"],
        "verification_command": f"test -f {task_id}.txt",
    }


CYCLE = {"tasks": [task("T-001", "T-002"), task("T-002", "T-001")]}
VALID = {"tasks": [task("T-001"), task("T-002", "T-001")]}


class Recording(OfflineModels):
    """The offline model, keeping every call it is asked."""

    def __init__(self, script: OfflineScript | None = None) -> None:
        super().__init__(script=script)
        self.calls: list[ModelCall] = []

    def model(self, call: ModelCall) -> FunctionModel:
        self.calls.append(call)
        return super().model(call)


def planning(models: OfflineModels, tmp_path: Path) -> PlanningActivities:
    return PlanningActivities(
        StepDeps(
            settings=Settings(),
            models=models,
            agents=load_agents(),
            templates=load_templates(),
            workspaces=GitWorkspaces(tmp_path, author_name="t", author_email="t@localhost"),
        )
    )


def scripted(*answers: dict[str, Any]) -> Recording:
    return Recording(OfflineScript.model_validate({Role.TASK_PLANNER.value: {"1": list(answers)}}))


def step(goal: str = SHORT, files: list[str] = FILES) -> PlanGraphInput:
    return PlanGraphInput(run_id="graph-1", goal=goal, files=files, base_branch="main")


async def test_plan_graph_answers_the_offline_default(tmp_path: Path) -> None:
    models = Recording()
    out = await planning(models, tmp_path).plan_graph(step())
    assert out.tasks == offline_plan(SHORT)
    assert out.repairs == []
    assert out.usage.calls == 1
    [call] = models.calls
    assert call.role == Role.TASK_PLANNER
    assert call.context == {
        "goal": SHORT,
        "files": sorted(FILES),
        "files_note": None,
        "base_branch": "main",
    }


async def test_plan_graph_repairs_a_cycle_once_with_the_validators_errors(
    tmp_path: Path,
) -> None:
    out = await planning(scripted(CYCLE, VALID), tmp_path).plan_graph(step())
    assert [t.id for t in out.tasks] == ["T-001", "T-002"]
    [repair] = out.repairs
    cycle = TaskPlan.model_validate(CYCLE).tasks
    [error] = graph_errors(cycle, FILES)
    assert "form a cycle" in error
    assert error in repair and "fix every problem" in repair


async def test_plan_graph_fails_as_invalid_output_naming_the_errors(tmp_path: Path) -> None:
    unknown = {"tasks": [task("T-001", "T-009")]}
    with pytest.raises(ApplicationError) as raised:
        await planning(scripted(CYCLE, unknown), tmp_path).plan_graph(step())
    assert raised.value.type == INVALID_OUTPUT and raised.value.non_retryable
    message = raised.value.message
    assert message.startswith("task-planner answered with invalid output")
    # The last answer's problem, as the validator words it.
    assert "T-001 requires T-009, which is not a task of the graph" in message


async def test_plan_graph_counts_existing_files_the_model_was_not_shown(tmp_path: Path) -> None:
    """The model sees a capped list; the atomic rule counts against every path."""
    hidden = [f"src/deep/pkg/module_{n:04d}.py" for n in range(TASK_PLANNER_FILES_CAP + 4)]
    wide = {"tasks": [task("T-001", files=hidden[-(MAX_EXISTING_FILES + 1) :])]}
    models = scripted(wide, VALID)
    out = await planning(models, tmp_path).plan_graph(step(files=["README.md", *hidden]))
    [repair] = out.repairs
    assert f"T-001 modifies {MAX_EXISTING_FILES + 1} existing files" in repair
    shown = models.calls[0].context
    assert len(shown["files"]) == TASK_PLANNER_FILES_CAP
    assert shown["files_note"].startswith("5 of the repository's")
