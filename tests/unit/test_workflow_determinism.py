"""The code a workflow runs makes none of the calls Temporal's workflow sandbox would stop.

A worker runs the workflows outside the sandbox by default (`LOOPS_WORKFLOW_SANDBOX`,
schemas/settings.py): the workflow tests run them inside it, and this check reads the
modules whose code runs in a workflow for what the sandbox guards, on every path, tested
or not: the real clock, randomness, I/O, threads and processes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2]

# What runs inside a workflow: the workflows themselves and the pure code they call. The
# settings (and the origin rules and payload keys they parse) are read by the worker and
# the API, never in a workflow.
PURE = ["deltas.py", "selection.py", "similarity.py"]
SETTINGS = {"settings.py", "origin_rules.py", "payload_keys.py"}
WORKFLOW_CODE = [
    *sorted((PACKAGE / "workflows").rglob("*.py")),
    *sorted(p for p in (PACKAGE / "schemas").glob("*.py") if p.name not in SETTINGS),
    *(PACKAGE / "playbook" / name for name in [*PURE, "workflow.py"]),
]

# Modules whose import alone says nothing non-deterministic is meant. loopworks'
# activity modules (the playbook's among them) are imported for their definitions (the
# workflow schedules them by reference, a worker runs them): what they do is not workflow
# code.
ALLOWED_MODULES = (
    "__future__",
    "asyncio",
    "collections",
    "dataclasses",
    "datetime",
    "difflib",
    "enum",
    "functools",
    "hashlib",
    "json",
    "math",
    "pathlib",
    "posixpath",
    "re",
    "re2",
    "string",
    "textwrap",
    "typing",
    "urllib.parse",
    "pydantic",
    "pydantic_core",
    "slugify",
    "temporalio",
    "loopworks.schemas",
    "loopworks.workflows",
    "loopworks.activities",
    "loopworks.playbook.activities",
    "loopworks.playbook.delivery",
    *(f"loopworks.playbook.{name.removesuffix('.py')}" for name in PURE),
)

# Attributes that read the clock, reach threads, processes, the network or the disk.
FORBIDDEN_ATTRIBUTES = {
    "now": "the real clock (workflow.now())",
    "utcnow": "the real clock (workflow.now())",
    "today": "the real clock (workflow.now())",
    "fromtimestamp": "the real clock (workflow.now())",
    "to_thread": "a thread",
    "run_in_executor": "a thread",
    "get_event_loop": "the event loop's clock",
    "get_running_loop": "the event loop's clock",
    "create_subprocess_exec": "a process",
    "create_subprocess_shell": "a process",
    "open_connection": "the network",
    "read_text": "the file system",
    "read_bytes": "the file system",
    "write_text": "the file system",
    "write_bytes": "the file system",
    "exists": "the file system",
    "iterdir": "the file system",
    "glob": "the file system",
    "open": "the file system",
    "mkdir": "the file system",
    "unlink": "the file system",
    "rename": "the file system",
}
FORBIDDEN_NAMES = {"open": "the file system", "input": "the terminal", "print": "stdout"}


def _allowed(module: str) -> bool:
    return any(module == ok or module.startswith(f"{ok}.") for ok in ALLOWED_MODULES)


def violations(source: str, name: str = "<source>") -> list[str]:
    """What in `source` the workflow sandbox would refuse, as 'name:line: why'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [
                f"{name}:{line}: imports {alias.name}"
                for alias in node.names
                if not _allowed(alias.name)
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            # datetime's types are fine: its clock is reached through them (attributes below).
            module = node.module or ""
            if not _allowed(module):
                found.append(f"{name}:{line}: imports from {module}")
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            # Called or handed on (`default_factory=datetime.now`): either way it runs.
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id == "workflow":
                continue  # workflow.now(): the workflow's own, replayed clock
            found.append(f"{name}:{line}: .{node.attr} reads {FORBIDDEN_ATTRIBUTES[node.attr]}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_NAMES:
                found.append(f"{name}:{line}: {func.id}() reaches {FORBIDDEN_NAMES[func.id]}")
    return found


def test_the_code_a_workflow_runs_makes_no_call_the_sandbox_would_stop() -> None:
    found = [
        problem
        for path in WORKFLOW_CODE
        for problem in violations(
            path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix()
        )
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "import time\n",
        "import random\n",
        "from uuid import uuid4\n",
        "import os\n",
        "import subprocess\n",
        "from loopworks.workspace.git import GitWorkspaces\n",
        "from datetime import datetime\nstamp = datetime.now()\n",
        "import datetime\nstamp = datetime.datetime.utcnow()\n",
        "from datetime import datetime\nfrom pydantic import BaseModel, Field\n\n"
        "class Stamped(BaseModel):\n    at: datetime = Field(default_factory=datetime.now)\n",
        "import asyncio\nasync def f():\n    await asyncio.to_thread(len, [])\n",
        "import asyncio\nclock = asyncio.get_event_loop().time()\n",
        "from pathlib import Path\ntext = Path('x').read_text()\n",
        "data = open('x').read()\n",
    ],
)
def test_the_check_finds_what_the_sandbox_would_stop(source: str) -> None:
    assert violations(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "from temporalio import workflow\nstamp = workflow.now()\n",
        "from datetime import timedelta\nwait = timedelta(seconds=1)\n",
        "import asyncio\nasync def f():\n    await asyncio.sleep(1)\n",
        "from loopworks.activities.repository import RepositoryActivities\n",
    ],
)
def test_the_check_lets_deterministic_code_pass(source: str) -> None:
    assert violations(source) == []


def test_the_check_reads_every_workflow_module() -> None:
    names = {path.relative_to(PACKAGE).as_posix() for path in WORKFLOW_CODE}
    assert {
        "workflows/loop.py",
        "workflows/graph/workflow.py",
        "workflows/graph/decisions.py",
        "playbook/workflow.py",
        "workflows/skills.py",
    } <= names
    assert all(path.is_file() for path in WORKFLOW_CODE)
