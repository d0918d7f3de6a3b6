"""The pydantic-ai agents are built once per shape and shared by calls (a structured
role's answer agent per answer type, role and strictness; the agent of PRODUCE, REFINE and
the skill generator): each call still sees only its own instructions, check, workspace and
tool log, run after run and when runs interleave."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, create_model
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import loopworks.agent.loop as loop
import loopworks.llm.structured as structured
from loopworks.llm.base import ModelCall
from loopworks.llm.facts import ANSWER_TOOL
from loopworks.schemas.roles import Role, judgements_model
from loopworks.schemas.steps import ARTIFACT_PATH

pytestmark = pytest.mark.unit


class Verdict(BaseModel):
    verdict: str


class Turns:
    """A ModelSource answering each request with the next of `turns`, after letting other
    tasks run (so concurrent calls interleave); keeps the instructions of every request."""

    strict_output = False

    def __init__(self, *turns: ModelResponse) -> None:
        self.turns = list(turns)
        self.instructions: list[str | None] = []
        self.infos: list[AgentInfo] = []

    def strict_rejected(self) -> None:
        pass

    def model(self, call: ModelCall) -> FunctionModel:
        return FunctionModel(self.respond, model_name="turns")

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(0)
        self.instructions.append(info.instructions)
        self.infos.append(info)
        return self.turns.pop(0)


def answers(verdict: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(ANSWER_TOOL, {"verdict": verdict})])


def writes(path: str, content: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("write_file", {"path": path, "content": content})])


def says(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def call(role: Role = Role.CRITIC) -> ModelCall:
    return ModelCall(role=role, run_id="run-1", model="m", context={"task": "t"})


@pytest.fixture(autouse=True)
def empty_caches() -> Iterator[None]:
    structured._answer_agent.cache_clear()
    loop._agent.cache_clear()
    yield
    structured._answer_agent.cache_clear()
    loop._agent.cache_clear()


def refusing(refused: str, seen: list[str]) -> Callable[[Verdict], None]:
    def check(answer: Verdict) -> None:
        seen.append(answer.verdict)
        if answer.verdict == refused:
            raise ValueError(f"not {refused}")

    return check


async def test_one_answer_agent_per_answer_type_role_and_strictness() -> None:
    source = Turns(*(answers("ok") for _ in range(5)))

    for _ in range(3):
        await structured.ask(source, call(), "Judge.", Verdict)
    assert structured._answer_agent.cache_info().misses == 1

    await structured.ask(source, call(Role.PLANNER), "Plan.", Verdict)
    source.strict_output = True
    await structured.ask(source, call(), "Judge.", Verdict)
    assert structured._answer_agent.cache_info().misses == 3
    [critic, _, _, planner, critic_strict] = [info.output_tools[0] for info in source.infos]
    assert "as the planner" in (planner.description or "")
    assert critic.strict is False and "as the critic" in (critic.description or "")
    assert critic_strict.strict is True and "as the critic" in (critic_strict.description or "")


async def test_concurrent_calls_each_get_their_own_instructions_and_check() -> None:
    first_seen: list[str] = []
    second_seen: list[str] = []
    first = Turns(answers("no"), answers("yes"))
    second = Turns(answers("no"))

    answered_first, answered_second = await asyncio.gather(
        structured.ask(first, call(), "First.", Verdict, refusing("no", first_seen)),
        structured.ask(second, call(), "Second.", Verdict, refusing("yes", second_seen)),
    )

    assert first_seen == ["no", "yes"] and answered_first.answer.verdict == "yes"
    assert answered_first.repairs and "not no" in answered_first.repairs[0]
    assert second_seen == ["no"] and answered_second.answer.verdict == "no"
    assert answered_second.repairs == []
    assert first.instructions == ["First.", "First."]
    assert second.instructions == ["Second."]
    # A call without a check is not refused by the check of an earlier call.
    third = Turns(answers("no"))
    assert (await structured.ask(third, call(), "Third.", Verdict)).repairs == []


async def test_concurrent_agents_write_into_each_calls_own_workspace(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    first = Turns(writes(ARTIFACT_PATH, "one"), writes("notes.md", "x"), says("done"))
    # The second forgets its deliverable first: only its own workspace decides the nudge.
    second = Turns(says("done"), writes(ARTIFACT_PATH, "two"), says("done"))

    outcome_one, outcome_two = await asyncio.gather(
        loop.run_agent(first, call(Role.PRODUCER), "Produce one.", one, 6, "produce"),
        loop.run_agent(second, call(Role.REFINER), "Produce two.", two, 6, "refine"),
    )

    assert (one / ARTIFACT_PATH).read_text() == "one"
    assert (two / ARTIFACT_PATH).read_text() == "two"
    assert not (two / "notes.md").exists()
    assert outcome_one.files_written == [ARTIFACT_PATH, "notes.md"]
    assert outcome_two.files_written == [ARTIFACT_PATH]
    assert outcome_one.repairs == [] and len(outcome_two.repairs) == 1
    assert set(first.instructions) == {"Produce one."}
    assert set(second.instructions) == {"Produce two."}
    # One agent (its tools' schemas made once) served both runs.
    assert loop._agent.cache_info().misses == 1


async def test_a_run_without_a_deliverable_is_not_nudged_after_one_with(tmp_path: Path) -> None:
    nudged = Turns(says("done"), writes(ARTIFACT_PATH, "#"), says("done"))
    outcome = await loop.run_agent(nudged, call(Role.PRODUCER), "P.", tmp_path, 6, "produce")
    assert len(outcome.repairs) == 1

    skill = tmp_path / "skill"
    skill.mkdir()
    free = Turns(says("done"))
    outcome = await loop.run_agent(free, call(Role.PRODUCER), "S.", skill, 6, "skill", None)
    assert outcome.repairs == [] and outcome.turns == 1


def _answer_type(n: int) -> type[BaseModel]:
    return create_model(f"Answer{n}", ok=(bool, ...))


def test_answer_types_made_per_call_do_not_pile_up() -> None:
    first = _answer_type(0)
    structured._answer_agent(first, Role.EVALUATOR, False)
    gone = weakref.ref(first)
    del first
    for n in range(1, structured.AGENT_CACHE_SIZE + 1):
        structured._answer_agent(_answer_type(n), Role.EVALUATOR, False)

    assert structured._answer_agent.cache_info().currsize == structured.AGENT_CACHE_SIZE
    gc.collect()
    assert gone() is None


def test_the_same_questions_make_the_same_answer_type() -> None:
    """So an evaluation asking what an earlier one asked finds its answer agent in the cache."""
    questions = {"clear": "Is it clear?", "short": "Is it short?"}
    assert judgements_model(questions) is judgements_model(dict(questions))
    assert judgements_model(questions) is not judgements_model({"clear": "Is it clear?"})
