"""Whole runs on a model that knows nothing of loopworks (`LiteralMessagesAPI`).

The stand-in answers only from what each request says: the agent definition, the step's
inputs and the tool schemas. A run that gets through proves the prompts and schemas, not
only the wiring; its knobs misbehave on purpose to show the repairs, the nudge and the
strict-output fallback.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from loopworks.agent.trajectory import RECORD_TEXT_CAP
from loopworks.llm.anthropic import AnthropicModels
from loopworks.prompts.catalog import load_agents
from loopworks.schemas.curation import CuratorPayload
from loopworks.schemas.learning import SkillLoopInput
from loopworks.schemas.run import RunStatus, StopReason
from loopworks.schemas.settings import Settings
from loopworks.schemas.steps import GitLocation
from loopworks.worker.build import build_models, build_worker
from loopworks.workflows.skills import SkillLoopWorkflow
from tests.fakes.literal_messages_api import LiteralMessagesAPI
from tests.workflows.conftest import LoopHarness, commit_all, names
from tests.workflows.test_loop import TITLE_RULE, remote_file

pytestmark = pytest.mark.workflow

TASK = "Write a one-page guide to rate limiting an HTTP API"
JUDGE_CHECKS = [
    {"kind": "llm", "question": question}
    for question in ("Does it explain token buckets?", "Does it mention 429?", "Is it brief?")
]
JUDGED_RULES = [
    {"id": f"asks-{n}", "description": f"Question {n}", "severity": "info", "check": check}
    for n, check in enumerate(JUDGE_CHECKS, start=1)
]


@pytest.fixture
def api() -> Iterator[LiteralMessagesAPI]:
    with LiteralMessagesAPI() as fake:
        yield fake


@asynccontextmanager
async def literal_worker(harness: LoopHarness, api: LiteralMessagesAPI) -> AsyncIterator[None]:
    settings = Settings(
        LOOPS_DATA_DIR=harness.data_dir,
        LOOPS_TASK_QUEUE=harness.task_queue,
        LOOPS_LLM="anthropic",
        ANTHROPIC_API_KEY="any",
        ANTHROPIC_BASE_URL=api.base_url,
    )
    models = build_models(settings)
    assert isinstance(models, AnthropicModels)
    try:
        async with build_worker(harness.env.client, settings, models=models):
            yield
    finally:
        await models.provider.client.close()


async def test_a_literal_model_runs_the_whole_loop(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=2, audit_probability=1.0)
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert "phase_error" not in names(events), [e.payload for e in events]
    assert names(events)[-1] == "pushed"
    assert state.status in (RunStatus.COMPLETED, RunStatus.STOPPED)
    # The producer followed its prompt: the deliverable is where the loop looks for it.
    assert TASK in remote_file(harness.origin, f"loops/{state.run_id}", "artifact.md")
    # Every model call of the run was a request to the stand-in.
    assert state.usage.calls == len(api.requests)
    # A server that takes strict tool input gets it on every answer tool.
    assert all(tool.get("strict") for r in api.forced_requests() for tool in r.tools)


async def test_an_invalid_answer_is_repaired_from_its_errors(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    api.corrupt_answers = 1  # the hydrator's first answer misses a required field
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1)
        await handle.result()
        events = await harness.events(handle)

    assert "phase_error" not in names(events)
    [repaired] = [e for e in events if e.event.value == "output_repaired"]
    assert repaired.step == "HYDRATE"
    first, second = api.forced_requests()[:2]
    assert not first.tool_error
    # The repair request carried the first answer and what was wrong with it.
    assert second.tool_error and "Field required" in str(second.messages[-1])


async def test_two_invalid_answers_are_a_phase_error(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    api.corrupt_answers = 2
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1)
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert state.stop_reason is not None and state.stop_reason.value == "phase_error"
    assert [e.payload.step for e in events if e.event.value == "phase_error"] == ["HYDRATE"]
    hydrations = [
        r
        for r in api.forced_requests()
        if "acceptance_criteria"
        in (r.forced_tool or {}).get("input_schema", {}).get("properties", {})
    ]
    assert len(hydrations) == 2 and hydrations[1].tool_error


async def test_an_agent_that_forgets_the_artifact_is_reminded_once(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    api.lazy_agent_turns = 1  # PRODUCE ends its first turn without writing anything
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1)
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert "phase_error" not in names(events)
    [nudged] = [e for e in events if e.event.value == "output_repaired"]
    assert "artifact.md" in nudged.payload.repairs[0]
    assert TASK in remote_file(harness.origin, f"loops/{state.run_id}", "artifact.md")


async def test_a_server_without_strict_tools_is_asked_once_per_worker(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    api.reject_strict = True
    async with literal_worker(harness, api):
        first = await harness.start(task=TASK, max_iterations=1)
        await first.result()
        second = await harness.start(task=TASK, max_iterations=1)
        state = (await second.result()).state
        events = await harness.events(second)

    assert names(events)[-1] == "pushed"
    assert state.stop_reason is not None and state.stop_reason.value != "phase_error"
    assert api.strict_rejections == 1
    strict = [r for r in api.requests if any(t.get("strict") for t in r.tools)]
    assert len(strict) == 1  # the rejected one; every later request went without


async def test_the_judged_checks_of_a_group_are_one_model_call(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1, rules=JUDGED_RULES)
        await handle.result()
        events = await harness.events(handle)

    judged = [
        r
        for r in api.forced_requests()
        if "asks-1" in (r.forced_tool or {}).get("input_schema", {}).get("properties", {})
    ]
    evaluations = [e for e in events if e.event.value == "evaluation_done"]
    # Three questions, one request; the phase switch re-evaluates the same commit with the
    # same checks, so it reuses their answers rather than asking again.
    assert len(judged) == 1 and len(evaluations) >= 2
    assert all(check["question"] in str(r.messages) for r in judged for check in JUDGE_CHECKS)
    assert evaluations[0].payload.groups["content"].checks >= len(JUDGE_CHECKS)
    assert evaluations[1].payload.reused >= len(JUDGE_CHECKS)


async def test_a_literal_model_curates_from_the_prompts_alone(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    # The playbook's steps too: the task curator and the reflector's tags are answered
    # from their prompts and schemas alone, and the run learns without an error.
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, max_iterations=1, playbook=True)
        state = (await handle.result()).state
        events = await harness.events(handle)

    happened = names(events)
    assert "failed" not in happened and "phase_error" not in happened, [
        e.payload for e in events if e.status != "ok"
    ]
    assert {"playbook_loaded", "curated"} <= set(happened)
    assert happened[-1] == "pushed"
    assert state.playbook is not None
    prompts = {request.system_text for request in api.requests}
    agents = load_agents()
    assert {agents["reflector"].prompt, agents["task-curator"].prompt} <= prompts


async def test_a_literal_skill_generator_writes_the_helper_it_is_asked_for(
    harness: LoopHarness, api: LiteralMessagesAPI, tmp_path: Path
) -> None:
    # The skill sub-loop on its own, asked for one helper: the generator, knowing only its
    # prompt and context, writes it at the path it is given. (The literal reflector
    # answers with required fields only, so no review: nothing is kept, and no error.)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# a project\n")
    head = commit_all(repo)
    params = SkillLoopInput(
        run_id=f"literal-skill-{uuid.uuid4().hex[:6]}",
        iteration=1,
        task=TASK,
        payload=CuratorPayload(summary="A word counter helps", python_helpers=["count_words"]),
        workspace=GitLocation(origin=str(repo), commit=head),
    )
    async with literal_worker(harness, api):
        result = await harness.env.client.execute_workflow(
            SkillLoopWorkflow.run, params, id=params.run_id, task_queue=harness.task_queue
        )
    helper = ".loops/skills/count_words.py"
    assert helper in result.rejected, result
    assert result.rejected[helper] == "the reflector did not review it"
    assert result.accepted == [] and result.deltas == []


async def test_a_literal_qa_agent_runs_the_command_it_is_told_and_its_verdict_ends_the_run(
    harness: LoopHarness, api: LiteralMessagesAPI
) -> None:
    """QA is offered the command tool and the run's diff; told to run a command, it does,
    in the sandbox, before answering; its verdict is the run's."""
    command = "echo qa-ran-this; exit 3"
    api.agent_commands = [command]
    async with literal_worker(harness, api):
        handle = await harness.start(task=TASK, rules=[TITLE_RULE], max_iterations=1)
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert "phase_error" not in names(events), [e.payload for e in events]
    verifier = [r for r in api.requests if "You are the QA verifier" in r.system_text]
    assert verifier, "QA was never asked"
    first = verifier[0]
    offered = {tool["name"] for tool in first.tools}
    assert {"run_command", "read_file", "list_files", "search", "answer"} == offered
    sent = str(first.messages[0])
    assert "## Diff Stat" in sent and "artifact.md" in sent and "## Patch" in sent
    # The command ran, once each time QA was asked, and its result (output and exit code)
    # went back to QA.
    ran = [b for r in verifier for b in r.tool_uses() if b.get("name") == "run_command"]
    assert [b["input"]["command"] for b in ran] == [command, command]
    assert "exit code 3\\nqa-ran-this" in str(verifier[-1].messages)
    # The literal answer is the first verdict its schema allows, citing (as its schema asks)
    # the command it ran: one that exited 3 is no evidence for it, asked again or not.
    verdicts = [e.payload for e in events if e.event.value == "qa_verdict"]
    assert [(v.verdict, v.evidence, v.accepted) for v in verdicts] == [
        ("VERIFIED", [command], False),
        ("VERIFIED", [command], False),
    ]
    assert "did not exit 0" in verdicts[0].rejected
    assert verdicts[0].commands == 1
    assert state.stop_reason == StopReason.QA_REJECTED
    saved = remote_file(harness.origin, f"loops/{state.run_id}", ".loops/trajectory/01-qa.jsonl")
    assert "qa-ran-this" in saved and '"step":"qa"' in saved


CALC_TASK = "Write `notes.py` with notes on add."


def calc_repo(tmp_path: Path) -> Path:
    """A repository with a module and the tests it plainly runs (`unittest`)."""
    repo = tmp_path / "calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    )
    (repo / ".gitignore").write_text("__pycache__/\n")
    commit_all(repo)
    return repo


async def test_a_literal_verifier_cites_the_tests_it_ran_and_a_proven_change_completes(
    harness: LoopHarness, api: LiteralMessagesAPI, tmp_path: Path
) -> None:
    """On a repository with tests, a literal producer writes the module its task names (a
    code change), the run's proof is the tests the repository plainly uses, and a literal
    QA verifier, told to run them, runs them and names them in its evidence, as its prompt
    and schema ask: its VERIFIED stands and the run completes."""
    repo = calc_repo(tmp_path)
    tests = "python3 -m unittest discover -s tests"
    api.agent_commands = [tests]
    async with literal_worker(harness, api):
        handle = await harness.start(
            task=CALC_TASK, repo=str(repo), rules=[TITLE_RULE], max_iterations=1
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert "phase_error" not in names(events), [e.payload for e in events]
    assert state.proof is not None and state.proof.commands == [tests]
    assert state.proof.changed_code == ["notes.py"]
    [verdict] = [e.payload for e in events if e.event.value == "qa_verdict"]
    assert (verdict.verdict, verdict.evidence, verdict.accepted) == ("VERIFIED", [tests], True)
    assert state.status == RunStatus.COMPLETED, state.stop


async def test_a_verified_citing_an_inline_script_longer_than_a_trajectory_keeps_stands(
    harness: LoopHarness, api: LiteralMessagesAPI, tmp_path: Path
) -> None:
    """QA writes no file, so a check beyond the repository's tests is a script inline in
    its command: one longer than a trajectory keeps of a call's arguments, which QA ran
    and which exited 0, cited exactly as QA ran it, is evidence for its VERIFIED."""
    lines = ["python3 - <<'EOF'", "from calc import add"]
    lines += [f"assert add({n}, {n + 1}) == {2 * n + 1}, 'add({n}, {n + 1})'" for n in range(100)]
    lines += ["print('all additions hold')", "EOF"]
    script = "\n".join(lines)
    assert len(script) > RECORD_TEXT_CAP
    repo = calc_repo(tmp_path)
    api.agent_commands = [script]
    async with literal_worker(harness, api):
        handle = await harness.start(
            task=CALC_TASK, repo=str(repo), rules=[TITLE_RULE], max_iterations=1
        )
        state = (await handle.result()).state
        events = await harness.events(handle)

    assert "phase_error" not in names(events), [e.payload for e in events]
    verifier = [r for r in api.requests if "You are the QA verifier" in r.system_text]
    assert "exit code 0\\nall additions hold" in str(verifier[-1].messages)
    [verdict] = [e.payload for e in events if e.event.value == "qa_verdict"]
    assert (verdict.verdict, verdict.evidence, verdict.accepted) == ("VERIFIED", [script], True)
    assert state.status == RunStatus.COMPLETED, state.stop
