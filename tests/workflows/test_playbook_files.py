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
from loopworks.llm.offline.model import OfflineModels
from loopworks.playbook import writer
from loopworks.schemas.events import EventName
from loopworks.schemas.playbook import PLAYBOOK_BRANCH, PLAYBOOK_PATH, ItemKind, playbook_name
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
