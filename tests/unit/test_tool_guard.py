"""The PreToolUse guard: what it still refuses is refused through execute(), allowed calls work.

What the sandbox holds (secrets, network, paths outside) is tested in test_sandbox.py; here, the
file tools' paths and the git refusals. Denied commands never reach a shell: the runner is
swapped for a tripwire that records calls, so a guard bug fails the test instead of running a
refused command against the workspace (these tests may run as root, unsandboxed).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from loopworks.agent.tools import ToolDenied, ToolGuard, execute, operations
from loopworks.checks.runner import CheckOutcome
from loopworks.schemas.rules import CommandCheck
from loopworks.schemas.steps import run_owned

pytestmark = pytest.mark.unit


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A workspace with a fake .git, and symlinks out of it to /etc and to a sibling directory."""
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside secret\n")
    (ws / ".git").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "README.md").write_text("# readme\nfoo bar\n")
    (ws / "build").mkdir()
    (ws / "build" / "x.o").write_bytes(b"\x00object")
    (ws / "inner").mkdir()
    (ws / "etc_link").symlink_to("/etc")
    (ws / "out_link").symlink_to(outside)
    (ws / "secret_link").symlink_to(outside / "secret.txt")
    (ws / "inner" / "up").symlink_to(outside)
    (ws / ".loops").mkdir()
    (ws / ".loops" / "run.json").write_text("{}\n")
    (ws / "records_link").symlink_to(".loops")
    return {"ws": ws, "outside": outside, "root": tmp_path}


def _snapshot(root: Path) -> dict[str, str]:
    """Every path under root (symlinks not followed) with a digest of what it is."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = "link:" + os.readlink(path)
            elif path.is_file():
                found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                found[rel] = "dir"
    return found


class _Tripwire:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, check: CommandCheck, workdir: Path, output_cap: int = 0) -> CheckOutcome:
        self.calls.append(check.command)
        return CheckOutcome(passed=True, detail="exit code 0\nTRIPWIRE", exit_code=0)


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> _Tripwire:
    wire = _Tripwire()
    monkeypatch.setattr(operations, "run_command_check", wire)
    return wire


def _cmd(command: str) -> tuple[str, dict[str, Any]]:
    return "run_command", {"command": command}


# (tool, arguments) of what the guard refuses: file tools leaving the workspace (they run in
# the worker, outside the sandbox), writes into .git or the run's records, and git commands
# that write, which the sandbox's read-only .git would fail with a message that says nothing;
# "{ws}" is replaced by the workspace's absolute path.
ESCAPES = [
    pytest.param("read_file", {"path": "../outside/secret.txt"}, id="read-dotdot-sibling"),
    pytest.param("read_file", {"path": "../etc/passwd"}, id="read-dotdot-etc-passwd"),
    pytest.param("read_file", {"path": "a/../../x"}, id="read-nested-dotdot"),
    pytest.param("read_file", {"path": "/etc/passwd"}, id="read-absolute-outside"),
    pytest.param("read_file", {"path": "{ws}/README.md"}, id="read-absolute-into-workspace"),
    pytest.param("write_file", {"path": "{ws}/new.txt", "content": "x"}, id="write-absolute"),
    pytest.param("read_file", {"path": "~/.bashrc"}, id="read-home-relative"),
    pytest.param("read_file", {"path": ""}, id="read-empty-path"),
    pytest.param("read_file", {"path": "READ\x00ME.md"}, id="read-nul-byte"),
    pytest.param("read_file", {"path": "etc_link/passwd"}, id="read-through-symlink-to-etc"),
    pytest.param(
        "write_file", {"path": "etc_link/pwned", "content": "x"}, id="write-through-symlink-to-etc"
    ),
    pytest.param(
        "write_file", {"path": "out_link/pwned.txt", "content": "x"}, id="write-through-dir-link"
    ),
    pytest.param("read_file", {"path": "secret_link"}, id="read-file-symlink-out"),
    pytest.param(
        "write_file", {"path": "secret_link", "content": "x"}, id="write-file-symlink-out"
    ),
    pytest.param(
        "edit_file", {"path": "secret_link", "old": "outside", "new": "x"}, id="edit-symlink-out"
    ),
    pytest.param(
        "write_file",
        {"path": "inner/up/deep/new.txt", "content": "x"},
        id="write-under-symlinked-parent-dir",
    ),
    pytest.param("list_files", {"path": "out_link"}, id="list-through-dir-link"),
    pytest.param("list_files", {"path": ".."}, id="list-parent"),
    pytest.param("search", {"pattern": "secret", "path": "inner/up"}, id="search-symlinked-dir"),
    pytest.param("search", {"pattern": "root", "path": "/etc"}, id="search-absolute"),
    pytest.param("write_file", {"path": ".git/config", "content": "x"}, id="write-git-config"),
    pytest.param(
        "write_file", {"path": ".git/hooks/post-commit", "content": "x"}, id="write-git-hook"
    ),
    pytest.param("edit_file", {"path": ".git/HEAD", "old": "main", "new": "x"}, id="edit-git-head"),
    pytest.param("read_file", {"path": "./.git/config"}, id="read-git-config"),
    pytest.param(
        "write_file", {"path": ".loops/history.jsonl", "content": "x"}, id="write-run-history"
    ),
    pytest.param(
        "edit_file", {"path": ".LOOPS/run.json", "old": "{", "new": "x"}, id="edit-run-state"
    ),
    pytest.param(
        "write_file",
        {"path": "records_link/run.json", "content": "x"},
        id="write-via-link-to-records",
    ),
    pytest.param(*_cmd("git push origin main"), id="git-push"),
    pytest.param(*_cmd("git remote add evil /tmp/x"), id="git-remote"),
    pytest.param(*_cmd("git config --global user.name x"), id="git-config-global"),
    pytest.param(*_cmd("git config core.hooksPath hooks"), id="git-config-hookspath"),
    pytest.param(*_cmd("git -C . commit -am 'done'"), id="git-commit"),
    pytest.param(*_cmd("git add -A && git stash"), id="git-add"),
    pytest.param(*_cmd("ls; git reset --hard HEAD~1"), id="git-reset-after-semicolon"),
    pytest.param(*_cmd("git checkout -b feature"), id="git-checkout-branch"),
    pytest.param(*_cmd("git restore README.md"), id="git-restore"),
    pytest.param(*_cmd("git branch -D main"), id="git-branch-delete"),
    pytest.param(*_cmd("git apply --index fix.patch"), id="git-apply-index"),
    pytest.param(*_cmd("bash -c 'git push'"), id="git-push-in-bash-c"),
    pytest.param(*_cmd("echo main | xargs /usr/bin/git switch"), id="git-switch-via-xargs"),
    pytest.param(*_cmd("printf '#!/bin/sh\\n' > .git/hooks/pre-commit"), id="write-git-hook"),
    pytest.param(*_cmd("cat .git/config"), id="read-git-config"),
    pytest.param(*_cmd("echo x >> sub/.GIT/info/exclude"), id="nested-git-dir"),
    pytest.param(*_cmd("echo " + "x" * (64 * 1024)), id="command-too-long"),
]


@pytest.mark.parametrize(("tool", "arguments"), ESCAPES)
def test_escape_attempt_is_denied(
    layout: dict[str, Path], tripwire: _Tripwire, tool: str, arguments: dict[str, Any]
) -> None:
    ws = layout["ws"]
    arguments = {
        k: v.replace("{ws}", str(ws)) if isinstance(v, str) else v for k, v in arguments.items()
    }
    before = _snapshot(layout["root"])
    result = execute(ws, tool, arguments)
    assert not result.ok, result.content
    assert result.content.startswith("refusing:"), result.content
    assert tripwire.calls == [], "a denied command reached the shell"
    assert _snapshot(layout["root"]) == before
    # Nothing from outside leaked into the answer.
    assert "outside secret" not in result.content
    assert "root:" not in result.content


def test_the_table_is_big_enough() -> None:
    assert len(ESCAPES) >= 15


# -- allowed calls work -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ('python3 -c "print(1)"', "1"),
        ("ls", "README.md"),
        ("grep -r foo .", "foo bar"),
        ("echo hi | tr a-z A-Z", "HI"),
    ],
)
def test_allowed_commands_run(layout: dict[str, Path], command: str, expected: str) -> None:
    result = execute(layout["ws"], "run_command", {"command": command})
    assert result.ok, result.content
    assert result.content.startswith("exit code 0\n")
    assert expected in result.content


def test_redirect_inside_the_workspace_writes_there(layout: dict[str, Path]) -> None:
    result = execute(layout["ws"], "run_command", {"command": "echo hi > out.txt"})
    assert result.ok, result.content
    assert (layout["ws"] / "out.txt").read_text() == "hi\n"


def test_rm_rf_of_a_directory_inside_works(layout: dict[str, Path]) -> None:
    before = _snapshot(layout["outside"])
    result = execute(layout["ws"], "run_command", {"command": "rm -rf build"})
    assert result.ok, result.content
    assert not (layout["ws"] / "build").exists()
    assert (layout["ws"] / "README.md").exists()
    assert (layout["ws"] / ".git" / "config").exists()
    assert _snapshot(layout["outside"]) == before


def test_file_tools_work_through_a_symlink_that_stays_inside(layout: dict[str, Path]) -> None:
    ws = layout["ws"]
    (ws / "docs").mkdir()
    (ws / "docs_link").symlink_to("docs")
    assert execute(ws, "write_file", {"path": "docs_link/a.md", "content": "x\n"}).ok
    assert (ws / "docs" / "a.md").read_text() == "x\n"
    assert execute(ws, "read_file", {"path": "docs_link/a.md"}).content == "x\n"


# -- secrets never reach a command ------------------------------------------------------------


def test_allowed_command_does_not_see_secrets(
    layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    command = 'python3 -c "import os; print(sorted(os.environ))"'
    result = execute(layout["ws"], "run_command", {"command": command})
    assert result.ok, result.content
    assert "ANTHROPIC_API_KEY" not in result.content
    assert "GITHUB_TOKEN" not in result.content
    assert "HOME" in result.content


def test_a_script_dumping_its_environment_finds_no_secret(
    layout: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the guard (a script file is not inspected), the environment itself is clean.
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    ws = layout["ws"]
    script = "import os\nfor k, v in os.environ.items():\n    print(k, v)\n"
    assert execute(ws, "write_file", {"path": "dump.py", "content": script}).ok
    result = execute(ws, "run_command", {"command": "python3 dump.py"})
    assert result.ok, result.content
    assert "sk-secret" not in result.content
    assert f"HOME {ws.resolve()}" in result.content


# -- the guard on its own ---------------------------------------------------------------------


def test_path_resolves_inside(layout: dict[str, Path]) -> None:
    guard = ToolGuard(layout["ws"])
    assert guard.path("README.md") == (layout["ws"] / "README.md").resolve()
    assert guard.path("new/dir/file.txt") == layout["ws"].resolve() / "new/dir/file.txt"
    assert guard.path(".") == layout["ws"].resolve()
    with pytest.raises(ToolDenied, match=r"\.\."):
        guard.path("inner/../README.md")


def test_path_denies_a_symlink_loop(layout: dict[str, Path]) -> None:
    ws = layout["ws"]
    (ws / "loop_a").symlink_to("loop_b")
    (ws / "loop_b").symlink_to("loop_a")
    with pytest.raises(ToolDenied):
        ToolGuard(ws).path("loop_a/x")


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("git push origin main", "loopworks publishes"),
        ("git config user.name x", "configuration is loopworks'"),
        ("git commit -m done", "loopworks stages and commits"),
        ("git checkout -- README.md", "git show HEAD:PATH > PATH"),
        ("cat .git/HEAD", "git log, git show or git status"),
    ],
)
def test_command_denials_say_why(tmp_path: Path, command: str, why: str) -> None:
    with pytest.raises(ToolDenied, match=r"^refusing: ") as denied:
        ToolGuard(tmp_path).command(command)
    assert why in str(denied.value)


@pytest.mark.parametrize("path", [".loops/skills/count.py", ".loops/references/01-tests.md"])
def test_the_skill_generator_may_write_its_helpers_and_notes(
    layout: dict[str, Path], path: str
) -> None:
    # Beside the run's records, but the skill sub-loop's own work (schemas/curation.py).
    result = execute(layout["ws"], "write_file", {"path": path, "content": "x\n"})
    assert result.ok, result.content
    assert (layout["ws"] / path).read_text() == "x\n"
    denied = execute(layout["ws"], "write_file", {"path": ".loops/run.json", "content": "{}"})
    assert not denied.ok


@pytest.mark.parametrize(
    ("path", "owned"),
    [
        (".loops/history.jsonl", True),
        (".loops/verify", True),
        ("./.LOOPS/run.json", True),  # one file on a case-insensitive checkout
        (".loops", True),
        (".loops/skills", True),  # the directory itself: a link there is no helper
        (".loops/skills/count.py", False),
        (".loops/references/01-tests.md", False),
        ("src/.loops/history.jsonl", False),
        ("artifact.md", False),
    ],
)
def test_the_runs_records_are_what_the_file_tools_refuse_and_a_step_puts_back(
    path: str, owned: bool
) -> None:
    # One rule for both (workspace/graph_records.py `keep_run_records`).
    assert run_owned(path) is owned


def test_the_run_records_are_readable(layout: dict[str, Path]) -> None:
    result = execute(layout["ws"], "read_file", {"path": ".loops/run.json"})
    assert result.ok, result.content
    assert result.content == "{}\n"


@pytest.mark.parametrize(
    "command",
    [
        "python3 -m pytest -q 2>&1 | tail -20",
        "cat <<'EOF' > notes.md\nit's a heredoc with $(no) expansion\nEOF",
        "for f in *.py; do echo $f; done",
        "find . -name '__pycache__' -exec rm -rf {} +",
        "git status && git diff --stat && git log --oneline -3",
        "mkdir -p src/pkg && touch src/pkg/__init__.py",
        "curl -s http://localhost:1/ || true",
        "ls > /dev/null 2>&1",
        "echo ${files[*]} $HOME",
        "git -C src log --oneline -- . && git diff HEAD~1 -- README.md",
        "git show HEAD:README.md > README.md",
        "git apply fix.patch && git branch -a && git --version",
        "grep -rn foo . --exclude-dir=.git && cat .gitignore .github/workflows/ci.yml",
        "find . -not -path './.git/*' -name '*.py' | xargs wc -l",
        # What the sandbox holds is not the guard's: these fail there, or do no harm.
        "rm -rf /tmp/build && cat /etc/hostname && env",
        "pip install --user -e . && curl -s https://example.com",
    ],
)
def test_ordinary_commands_are_allowed(tmp_path: Path, command: str) -> None:
    assert ToolGuard(tmp_path).command(command) == command
