"""A skill the playbook learns reaches later runs (docs/playbook.md#files): the helper the
skill sub-loop kept is stored beside the playbook, in the version that adds its item, and
every later run given that item finds it in its workspace, uncommitted; a rollback to
before it takes it away again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo

from loopworks.llm.base import ModelCall
from loopworks.llm.offline.model import OfflineModels, OfflineScript
from loopworks.playbook import writer
from loopworks.schemas.events import EventName
from loopworks.schemas.playbook import (
    FILE_MAX_CHARS,
    PLAYBOOK_BRANCH,
    PLAYBOOK_PATH,
    ItemKind,
    playbook_name,
)
from loopworks.schemas.roles import Role
from loopworks.schemas.run import RunStatus
from loopworks.schemas.settings import Settings
from tests.workflows.conftest import LoopHarness
from tests.workflows.test_playbook import TASK, git, of, run, settings, store, worker

pytestmark = pytest.mark.workflow

HELPER = ".loops/skills/count_words.py"
# A command check that imports the helper, as a later run's rule would use it.
IMPORTS_HELPER = {
    "id": "imports-count-words",
    "description": "The count_words helper can be imported",
    "check": {
        "kind": "command",
        "command": 'python3 -c \'import sys; sys.path.insert(0, ".loops/skills"); '
        "import count_words'",
    },
}


class ProducerWorkspaces(OfflineModels):
    """The offline model, noting what each producer's workspace holds at HELPER."""

    def __init__(self, workspaces: Path) -> None:
        super().__init__()
        self.workspaces = workspaces
        self.seen: dict[str, str | None] = {}

    async def respond(self, call: ModelCall, messages: list[ModelMessage], info: AgentInfo) -> Any:
        if call.role == Role.PRODUCER and call.run_id not in self.seen:
            helper = self.workspaces / call.run_id / HELPER
            self.seen[call.run_id] = helper.read_text() if helper.is_file() else None
        return await super().respond(call, messages, info)


def tree(repo: Path, ref: str) -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", ref).split()


async def test_a_kept_helper_reaches_later_runs_until_a_rollback_takes_it_away(
    harness: LoopHarness, repo: Path
) -> None:
    origin, name = str(repo), playbook_name(str(repo))
    models = ProducerWorkspaces(Settings(LOOPS_DATA_DIR=harness.data_dir).workspaces_dir)
    async with worker(harness, models):
        first = await run(harness, repo, task=f"{TASK} [skill:count_words]")
        (done,) = of(first.log, EventName.SKILL_LOOP_DONE)
        assert done.payload.accepted == [HELPER]
        kept = git(repo, "show", f"{first.state.branch}:{HELPER}")

        # Stored beside the playbook, by the very commit that adds the item naming it.
        learnt = store(harness).current(origin, name)
        assert learnt is not None
        (skill,) = [i for i in learnt.items if i.kind == ItemKind.SKILL]
        assert skill.files == [HELPER] and HELPER in skill.content
        assert git(repo, "show", f"{PLAYBOOK_BRANCH}:{HELPER}") == kept
        added_by = git(repo, "log", "--format=%H", PLAYBOOK_BRANCH, "--", HELPER).split()
        assert len(added_by) == 1
        jsonl_at = git(repo, "show", f"{added_by[0]}:{PLAYBOOK_PATH}")
        assert skill.id in jsonl_at
        assert skill.id not in git(repo, "show", f"{added_by[0]}^:{PLAYBOOK_PATH}")
        before = learnt.version - 1  # the run's own batch; the skill's came after it

        # Run 2, on the base branch, is given the item: its producer finds the helper, a
        # command check importing it passes, and the helper is not committed on its branch.
        second = await run(harness, repo, rules=[IMPORTS_HELPER], max_iterations=1)
        assert second.state.status == RunStatus.COMPLETED
        assert second.state.playbook is not None
        assert skill.id in second.state.playbook.item_ids
        assert models.seen[second.state.run_id] == kept
        evaluated = of(second.log, EventName.EVALUATION_DONE)
        assert evaluated and all(e.payload.failed == [] for e in evaluated)
        assert HELPER not in tree(repo, second.state.branch)

        # Rolled back to before the skill: run 3 has neither the item nor the helper.
        back = await writer.rollback(harness.env.client, settings(harness), name, origin, before)
        assert HELPER not in tree(repo, PLAYBOOK_BRANCH)
        third = await run(harness, repo, rules=[IMPORTS_HELPER], max_iterations=1)

    assert third.state.playbook is not None and third.state.playbook.version == back.version
    assert skill.id not in third.state.playbook.item_ids
    assert third.state.playbook.files is None
    assert models.seen[third.state.run_id] is None
    evaluated = of(third.log, EventName.EVALUATION_DONE)
    assert evaluated and all(e.payload.failed == ["imports-count-words"] for e in evaluated)


NOTE = ".loops/references/01-how-tests-run.md"


def long_helper() -> str:
    """A working helper, its self-test passing, but longer than the playbook stores."""
    head = f'''#!/usr/bin/env python3
"""count_words: count the words of files. Run: python3 {HELPER} [FILE ...]"""

import argparse
import sys

'''
    tail = """

def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return 0 if len("a b".split()) == 2 else 1
    for name in args.files:
        print(name, len(open(name).read().split()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
"""
    padding = "".join(f"# A word is what str.split() separates: note {n}.\n" for n in range(600))
    text = head + padding + tail
    assert len(text) > FILE_MAX_CHARS
    return text


async def test_a_helper_too_long_to_store_is_rejected_and_no_item_tells_of_it(
    harness: LoopHarness, repo: Path
) -> None:
    """The playbook stores a file only under FILE_MAX_CHARS: a longer helper, though it
    works, is rejected unreviewed (the reflector is shown whole files only) and leaves the
    run's branch; the curator's ADD naming it anyway is dropped, since later runs given
    that item would never get the helper; the note that fits is kept with its item."""
    script = OfflineScript.model_validate(
        {
            "skill-generator": {
                "*": {
                    "files": [
                        {"path": HELPER, "content": long_helper()},
                        {"path": NOTE, "content": "# How tests run\n\n`python3 -m unittest`\n"},
                    ],
                    "summary": "Wrote the helper and the note.",
                }
            },
            "skill-curator": {
                "*": {
                    "summary": "Recorded the helper and the note.",
                    "deltas": [
                        {
                            "op": "ADD",
                            "kind": "skill",
                            "section": "skills",
                            "content": f"Count words with `python3 {HELPER} FILE`.",
                        },
                        {
                            "op": "ADD",
                            "kind": "reference",
                            "section": "references",
                            "content": f"How the tests run: `{NOTE}`.",
                        },
                    ],
                }
            },
        }
    )
    origin = str(repo)
    async with worker(harness, OfflineModels(script=script)):
        result = await run(
            harness, repo, task=f"{TASK} [skill:count_words] [reference:how tests run]"
        )

    assert result.state.status == RunStatus.COMPLETED
    (done,) = of(result.log, EventName.SKILL_LOOP_DONE)
    assert done.payload.accepted == [NOTE]
    assert "too long" in done.payload.rejected[HELPER]
    assert f"{FILE_MAX_CHARS:,}" in done.payload.rejected[HELPER]
    branch = tree(repo, result.state.branch)
    assert NOTE in branch and HELPER not in branch
    playbook = store(harness).current(origin, playbook_name(origin))
    assert playbook is not None
    assert not [i for i in playbook.items if HELPER in i.content]
    (note,) = [i for i in playbook.items if i.kind == ItemKind.REFERENCE]
    assert note.files == [NOTE] and list(playbook.files) == [NOTE]
