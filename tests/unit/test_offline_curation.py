"""The offline model's delta-playbook answers (`llm/offline/curation.py`): the task
curator's markers, the helpers the skill generator writes (run here, as the skill
sub-loop runs their checks), the reflector's verdicts, the curator's deltas and the
reflector's tags. Each answer is validated as the activity validates it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loopworks.checks.runner import run_command_check
from loopworks.llm.facts import SELF_TEST_FLAG
from loopworks.llm.offline.answers import default_answer, draft_files
from loopworks.schemas.contexts import (
    AcceptedFile,
    ReflectorContext,
    RoleContext,
    SkillCuratorContext,
    SkillGeneratorContext,
    SkillReflectorContext,
    TaskCuratorContext,
)
from loopworks.schemas.curation import (
    REFERENCES_DIR,
    SKILLS_DIR,
    CuratorPayload,
    HelperVerdict,
    SkillCuration,
    SkillReview,
    curated_deltas,
    helper_names,
    helper_path,
    tag_deltas,
)
from loopworks.schemas.playbook import AddDelta, ItemKind, PlaybookItem, Tag, TagDelta
from loopworks.schemas.roles import Draft, ReflectionAnswer, Role
from loopworks.schemas.rules import CommandCheck
from loopworks.schemas.run import RunStatus, StopReason

pytestmark = pytest.mark.unit

TASK = "Write a rollback guide for the billing service"
CRITERIA = ["The guide says how to roll back", "The guide names the on-call channel"]
ITEM = PlaybookItem(
    id="pb-1-1",
    kind=ItemKind.CONSTRAINT,
    section="testing",
    content="Run the tests with make test.",
    created_in=1,
    updated_in=1,
)


def offline(role: Role, context: RoleContext) -> dict[str, Any]:
    return default_answer(role, context.model_dump(mode="json"))


def curate(
    task: str, outcome: str = "success", items: list[PlaybookItem] | None = None
) -> CuratorPayload:
    context = TaskCuratorContext(
        task=task,
        outcome=outcome,
        summary="Run ended with threshold_reached after 1 iteration(s)",
        friction_points=[],
        proposed_changes=[],
        acceptance_criteria=CRITERIA,
        playbook_items=items or [],
    )
    return CuratorPayload.model_validate(offline(Role.TASK_CURATOR, context))


# --- the task curator's markers --------------------------------------------------------------


def test_without_markers_no_sub_loop_is_asked_for() -> None:
    payload = curate(TASK)
    assert (payload.python_helpers, payload.reference_requests) == ([], [])


def test_skill_and_reference_markers_ask_for_helpers_and_notes() -> None:
    task = f"{TASK} [skill:count_words] [reference:how a rollback is run] [skill:count_words]"
    payload = curate(task)
    assert payload.python_helpers == ["count_words"]  # each once
    assert payload.reference_requests == ["how a rollback is run"]
    assert helper_names(payload) == ["count_words"]


def test_a_broken_skill_marker_asks_for_a_helper_too_under_its_file_name() -> None:
    payload = curate(f"{TASK} [skill:count_words] [skill-broken:Broken Helper]")
    assert payload.python_helpers == ["count_words", "broken_helper"]
    assert helper_names(payload) == payload.python_helpers


def test_markers_are_asked_for_whatever_the_outcome() -> None:
    assert curate(f"{TASK} [skill:count_words]", "failure").python_helpers == ["count_words"]


def test_a_successful_run_adds_one_constraint_naming_its_first_criterion() -> None:
    payload = curate(f"{TASK} [skill:count_words]")
    [update] = payload.proposed_updates
    assert (update.action, update.kind) == ("add", ItemKind.CONSTRAINT)
    assert CRITERIA[0] in update.description
    assert "[skill:" not in update.description  # the markers are no lesson
    assert update.target == "rollback"  # the task's longest word
    [delta] = curated_deltas(payload)
    assert isinstance(delta, AddDelta) and delta.section == "rollback"


@pytest.mark.parametrize("outcome", ["partial", "failure"])
def test_a_run_that_did_not_succeed_adds_nothing(outcome: str) -> None:
    assert curate(TASK, outcome).proposed_updates == []


def test_a_lesson_the_playbook_already_holds_is_not_proposed_again() -> None:
    [update] = curate(TASK).proposed_updates
    # The same lesson, in other case and punctuation: the playbook would merge it anyway.
    known = ITEM.model_copy(update={"content": update.description.upper() + "!"})
    assert curate(TASK, items=[known]).proposed_updates == []
    assert len(curate(TASK, items=[ITEM]).proposed_updates) == 1


# --- the skill generator ---------------------------------------------------------------------

HELPER = helper_path("count_words")
BROKEN = helper_path("broken_helper")
NOTE = f"{REFERENCES_DIR}/how-a-rollback-is-run.md"


def generate(task: str) -> Draft:
    context = SkillGeneratorContext.asking(
        task=task,
        curator_summary="asked for by the curator",
        helper_paths=[HELPER, BROKEN],
        reference_requests=["how a rollback is run"],
        reference_paths=[NOTE],
        existing_skills=[],
    )
    return Draft.model_validate(offline(Role.SKILL_GENERATOR, context))


def write(draft: Draft, root: Path) -> dict[str, str]:
    files = {file["path"]: file["content"] for file in draft_files(draft.model_dump())}
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content, encoding="utf-8")
    return files


def run(command: str, root: Path) -> bool:
    return run_command_check(CommandCheck(command=command, timeout_seconds=30), root).passed


def test_the_generator_writes_every_file_at_its_given_path() -> None:
    draft = generate(f"{TASK} [skill:count_words] [skill:broken_helper]")
    assert [file.path for file in draft.files] == [HELPER, BROKEN, NOTE]
    assert all(path.startswith(f"{SKILLS_DIR}/") for path in (HELPER, BROKEN))
    note = draft.files[2].content
    assert note.startswith("# how a rollback is run\n") and TASK in note
    assert "[skill:" not in note


def test_each_helper_runs_and_passes_its_self_test(tmp_path: Path) -> None:
    write(generate(f"{TASK} [skill:count_words] [skill:broken_helper]"), tmp_path)
    for path in (HELPER, BROKEN):
        assert run(f"python3 {path} {SELF_TEST_FLAG}", tmp_path), path
        assert run(f"python3 {path} --help | grep -q -- {SELF_TEST_FLAG}", tmp_path), path
    # And it does what its docstring says, on a file of the repository.
    (tmp_path / "two.txt").write_text("one two\nthree\n")
    assert run(f"python3 {HELPER} two.txt | grep -q '2 lines, 3 words'", tmp_path)


def test_the_broken_marker_makes_that_helpers_self_test_fail(tmp_path: Path) -> None:
    write(generate(f"{TASK} [skill:count_words] [skill-broken:broken_helper]"), tmp_path)
    assert run(f"python3 {HELPER} {SELF_TEST_FLAG}", tmp_path)
    assert not run(f"python3 {BROKEN} {SELF_TEST_FLAG}", tmp_path)


# --- the skill reflector and curator, and the sub-loop they make -----------------------------


def review(task: str, files: dict[str, str]) -> SkillReview:
    context = SkillReflectorContext(
        task=task,
        helper_paths=[HELPER, BROKEN],
        reference_paths=[NOTE],
        files=files,
        generator_summary="wrote them",
    )
    return SkillReview.model_validate(offline(Role.SKILL_REFLECTOR, context))


def test_the_reflector_accepts_helpers_with_their_self_test_and_notes_without_a_command() -> None:
    answer = review(TASK, {HELPER: "print(1)\n", NOTE: "# Note\n", BROKEN: "  \n"})
    verdicts = {r.path: (r.verdict, r.check_command) for r in answer.reviews}
    assert verdicts == {
        HELPER: (HelperVerdict.ACCEPT, f"python3 {HELPER} {SELF_TEST_FLAG}"),
        NOTE: (HelperVerdict.ACCEPT, ""),
        BROKEN: (HelperVerdict.REJECT, ""),  # empty
    }


def sub_loop(task: str, root: Path) -> SkillCuration:
    """The skill sub-loop as `activities/skills.py` runs it: generate, review, run each
    helper's check, curate what was kept."""
    files = write(generate(task), root)
    accepted = []
    for verdict in review(task, files).reviews:
        command = verdict.check_command
        if verdict.verdict == HelperVerdict.ACCEPT and (not command or run(command, root)):
            accepted.append(AcceptedFile(review=verdict, content=files[verdict.path]))
    context = SkillCuratorContext(task=task, accepted=accepted, playbook_items=[ITEM])
    return SkillCuration.model_validate(offline(Role.SKILL_CURATOR, context))


def test_the_curator_adds_a_skill_per_kept_helper_and_a_reference_per_note(
    tmp_path: Path,
) -> None:
    curation = sub_loop(f"{TASK} [skill:count_words] [skill-broken:broken_helper]", tmp_path)
    adds = [delta for delta in curation.deltas if isinstance(delta, AddDelta)]
    assert len(adds) == len(curation.deltas) == 2
    skill, note = adds
    # The broken helper's check failed: only the working one is recorded.
    assert (skill.kind, skill.section) == (ItemKind.SKILL, "skills")
    assert f"`{HELPER}`" in skill.content and f"`python3 {HELPER} --help`" in skill.content
    assert BROKEN not in curation.model_dump_json()
    assert (note.kind, note.section) == (ItemKind.REFERENCE, "references")
    assert f"`{NOTE}`" in note.content
    assert curation.summary == "Recorded 1 skill(s) and 1 reference(s)."


def test_nothing_kept_records_nothing() -> None:
    context = SkillCuratorContext(task=TASK, accepted=[], playbook_items=[ITEM])
    curation = SkillCuration.model_validate(offline(Role.SKILL_CURATOR, context))
    assert curation.deltas == []


# --- the reflector's tags ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "score", "tag"),
    [
        (StopReason.THRESHOLD_REACHED, 0.95, Tag.HELPFUL),
        (StopReason.ITERATION_LIMIT, 0.6, Tag.NEUTRAL),
        (StopReason.STAGNATION, 0.0, Tag.HARMFUL),
    ],
)
def test_the_reflector_tags_every_given_item_by_the_outcome(
    reason: StopReason, score: float, tag: Tag
) -> None:
    items = [ITEM, ITEM.model_copy(update={"id": "pb-2-1"})]
    context = ReflectorContext(
        task=TASK,
        stop_reason=reason,
        status=RunStatus.STOPPED,
        iteration=2,
        last_score=score,
        guidance=[],
        acceptance_criteria=CRITERIA,
        playbook_items=items,
    )
    answer = ReflectionAnswer.model_validate(offline(Role.REFLECTOR, context))
    assert [(t.item_id, t.tag) for t in answer.playbook_tags] == [("pb-1-1", tag), ("pb-2-1", tag)]
    deltas = tag_deltas(answer.playbook_tags, ["pb-1-1", "pb-2-1"])
    assert deltas == [TagDelta(item_id="pb-1-1", tag=tag), TagDelta(item_id="pb-2-1", tag=tag)]
