"""The facts the code relies on that a model must be told: prompts read them from here.

Agent definitions write `{{artifact_path}}`, `{{answer_tool}}`, `{{write_file}}` and so on;
the catalog fills them in when it loads the agents, so a renamed tool or file changes the
prompts with it and no prompt states a name the code does not use.
"""

from __future__ import annotations

from loopworks.agent.tools import TOOLS
from loopworks.llm.facts import ANSWER_TOOL, SELF_TEST_FLAG
from loopworks.schemas.contexts import TASK_PLANNER_FILES_CAP
from loopworks.schemas.curation import REFERENCES_DIR, SKILLS_DIR
from loopworks.schemas.playbook import FILE_MAX_CHARS
from loopworks.schemas.proof import PROOF_TIMEOUT_SECONDS
from loopworks.schemas.run import StopReason
from loopworks.schemas.steps import ARTIFACT_PATH
from loopworks.schemas.tasks import LEDGER_PATH, MAX_EXISTING_FILES, TASKS_DIR


def prompt_facts() -> dict[str, str]:
    """Every placeholder an agent definition may use, with its value."""
    facts = {
        "artifact_path": ARTIFACT_PATH,
        "answer_tool": ANSWER_TOOL,
        # The workspace tools, as a list a prompt can quote: `read_file`, `write_file`, …
        "workspace_tools": ", ".join(f"`{name}`" for name in TOOLS),
        # The atomic rule, as the task graph's validator counts it (docs/graphs.md#tasks).
        "max_existing_files": str(MAX_EXISTING_FILES),
        "task_planner_files_cap": str(TASK_PLANNER_FILES_CAP),
        # A task's verification command's one limit, wherever it runs (docs/graphs.md).
        "verification_timeout_seconds": str(int(PROOF_TIMEOUT_SECONDS)),
        # A task graph's own record, which its loops' tools refuse to write
        # (docs/graphs.md#the-ledger).
        "ledger_path": LEDGER_PATH,
        "tasks_dir": TASKS_DIR,
        # Where the skill sub-loop writes: helpers and reference notes
        # (docs/playbook.md#the-skill-sub-loop).
        "skills_dir": SKILLS_DIR,
        "references_dir": REFERENCES_DIR,
        "self_test_flag": SELF_TEST_FLAG,
        # Every reason a run can stop for, as the reflector is given it.
        "stop_reasons": ", ".join(reason.value for reason in list(StopReason)[:-1])
        + f" or {list(StopReason)[-1].value}",
        # A skill file is kept only when shorter than this (schemas/learning.py `fits`).
        "skill_file_max_chars": f"{FILE_MAX_CHARS:,}",
    }
    facts.update({name: name for name in TOOLS})
    return facts
