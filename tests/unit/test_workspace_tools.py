"""The producer's workspace tools: happy paths, errors as results, the registry."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from loopworks.agent.tools import (
    TOOLS,
    ToolResult,
    ToolSpec,
    calls,
    edit_file,
    execute,
    list_files,
    operations,
    read_file,
    run_command,
    search,
    tool_definitions,
    write_file,
)

pytestmark = pytest.mark.unit


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\nneedle in git\n")
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("def f():\n    return 'needle'\n")
    (root / "src" / "main.py").write_text("import pkg\nprint('hello')\n")
    (root / "README.md").write_text("# title\nsome needle here\n")
    (root / "blob.bin").write_bytes(b"needle\x00\x01\x02")
    return root


# -- read_file --------------------------------------------------------------------------------


def test_read_file_returns_the_text(ws: Path) -> None:
    result = read_file(ws, "README.md")
    assert result == ToolResult(ok=True, content="# title\nsome needle here\n")


def test_read_file_offset_and_limit(ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = read_file(ws, "n.txt", offset=2, limit=3)
    assert result.ok
    assert result.content.startswith("line 3\nline 4\nline 5\n")
    assert "line 6" not in result.content
    assert "truncated" in result.content and "offset=5" in result.content


def test_read_file_to_the_end_has_no_truncation_note(ws: Path) -> None:
    (ws / "n.txt").write_text("a\nb\n")
    assert read_file(ws, "n.txt", limit=2).content == "a\nb\n"


def test_read_file_is_capped(ws: Path) -> None:
    (ws / "big.txt").write_text(("x" * 99 + "\n") * 5000)  # 500 kB
    result = read_file(ws, "big.txt", limit=100_000)
    assert result.ok
    body, _, note = result.content.rpartition("\n[truncated")
    assert len(body.encode()) <= calls.READ_CAP_BYTES
    assert "KiB cap" in note and "offset=" in note


def test_read_file_cuts_one_huge_line(ws: Path) -> None:
    (ws / "min.js").write_text("y" * 300_000 + "\nnext\n")
    result = read_file(ws, "min.js")
    assert result.ok
    assert len(result.content) < calls.READ_CAP_BYTES + 200
    assert "cut here" in result.content


@pytest.mark.parametrize(
    ("path", "message"),
    [("missing.txt", "not found"), ("src", "not a file"), ("blob.bin", "binary")],
)
def test_read_file_errors(ws: Path, path: str, message: str) -> None:
    result = read_file(ws, path)
    assert not result.ok
    assert message in result.content


def test_read_file_offset_past_the_end(ws: Path) -> None:
    result = read_file(ws, "README.md", offset=10)
    assert not result.ok
    assert "past the end" in result.content


def test_read_file_empty(ws: Path) -> None:
    (ws / "empty.txt").write_text("")
    result = read_file(ws, "empty.txt")
    assert result.ok and "empty" in result.content


# -- write_file -------------------------------------------------------------------------------


def test_write_file_creates_parents(ws: Path) -> None:
    result = write_file(ws, "new/deep/dir/file.txt", "content\n")
    assert result.ok, result.content
    assert "created" in result.content
    assert (ws / "new" / "deep" / "dir" / "file.txt").read_text() == "content\n"


def test_write_file_overwrites(ws: Path) -> None:
    result = write_file(ws, "README.md", "new\n")
    assert result.ok and "overwrote" in result.content
    assert (ws / "README.md").read_text() == "new\n"


def test_write_file_caps_size(ws: Path) -> None:
    result = write_file(ws, "huge.txt", "x" * (calls.WRITE_CAP_BYTES + 1))
    assert not result.ok
    assert "at most" in result.content
    assert not (ws / "huge.txt").exists()


def test_write_file_onto_a_directory(ws: Path) -> None:
    result = write_file(ws, "src", "x")
    assert not result.ok
    assert "directory" in result.content


# -- edit_file --------------------------------------------------------------------------------


def test_edit_file_replaces_a_unique_occurrence(ws: Path) -> None:
    result = edit_file(ws, "src/main.py", "print('hello')", "print('bye')")
    assert result.ok, result.content
    assert (ws / "src" / "main.py").read_text() == "import pkg\nprint('bye')\n"


def test_edit_file_not_found(ws: Path) -> None:
    result = edit_file(ws, "src/main.py", "absent text", "x")
    assert not result.ok
    assert "0 matches" in result.content
    assert (ws / "src" / "main.py").read_text() == "import pkg\nprint('hello')\n"


def test_edit_file_many_matches(ws: Path) -> None:
    (ws / "rep.txt").write_text("a\na\na\n")
    result = edit_file(ws, "rep.txt", "a", "b")
    assert not result.ok
    assert "3 times" in result.content
    assert (ws / "rep.txt").read_text() == "a\na\na\n"


def test_edit_file_keeps_crlf(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    assert edit_file(ws, "win.txt", "two", "2").ok
    assert (ws / "win.txt").read_bytes() == b"one\r\n2\r\n"


@pytest.mark.parametrize(
    ("path", "old", "new", "message"),
    [
        ("missing.txt", "a", "b", "not found"),
        ("README.md", "title", "title", "identical"),
        ("blob.bin", "needle", "x", "binary"),
        ("latin1.txt", "caf", "x", "not UTF-8"),
    ],
)
def test_edit_file_errors(ws: Path, path: str, old: str, new: str, message: str) -> None:
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    result = edit_file(ws, path, old, new)
    assert not result.ok
    assert message in result.content


# -- list_files -------------------------------------------------------------------------------


def test_list_files_recursive_skipping_git(ws: Path) -> None:
    result = list_files(ws)
    assert result.ok
    assert result.content.splitlines() == [
        "README.md",
        "blob.bin",
        "src/main.py",
        "src/pkg/mod.py",
    ]


def test_list_files_pattern_and_path(ws: Path) -> None:
    assert list_files(ws, pattern="*.py").content.splitlines() == [
        "src/main.py",
        "src/pkg/mod.py",
    ]
    assert list_files(ws, path="src/pkg").content == "src/pkg/mod.py"
    assert list_files(ws, pattern="src/*/*.py").content == "src/pkg/mod.py"


def test_list_files_shows_symlinks_without_following(ws: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "hidden.txt").write_text("x")
    (ws / "link").symlink_to(other)
    listing = list_files(ws).content.splitlines()
    assert "link@" in listing
    assert not any("hidden.txt" in line for line in listing)


def test_list_files_is_capped(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operations, "LIST_CAP_ENTRIES", 2)
    result = list_files(ws)
    assert result.ok
    assert result.content.splitlines()[:2] == ["README.md", "blob.bin"]
    assert "truncated" in result.content


def test_list_files_errors_and_empty(ws: Path) -> None:
    assert not list_files(ws, path="nowhere").ok
    result = list_files(ws, pattern="*.rs")
    assert result.ok and "no files" in result.content


# -- search -----------------------------------------------------------------------------------


def test_search_finds_lines(ws: Path) -> None:
    result = search(ws, "needle")
    assert result.ok
    assert result.content.splitlines() == [
        "README.md:2: some needle here",
        "src/pkg/mod.py:2:     return 'needle'",
    ]  # not .git/config, not the binary file


def test_search_glob_path_and_regex(ws: Path) -> None:
    assert search(ws, r"^def \w+", glob="*.py").content == "src/pkg/mod.py:1: def f():"
    assert search(ws, "needle", path="README.md").content == "README.md:2: some needle here"
    assert search(ws, "(?i)HELLO", path="src").content == "src/main.py:2: print('hello')"


def test_search_no_match_and_bad_regex(ws: Path) -> None:
    result = search(ws, "zebra")
    assert result.ok and "no matches" in result.content
    bad = search(ws, "(unclosed")
    assert not bad.ok and "invalid regular expression" in bad.content


def test_search_is_capped(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operations, "SEARCH_CAP_MATCHES", 3)
    (ws / "many.txt").write_text("hit\n" * 10)
    result = search(ws, "hit")
    assert result.content.count("many.txt:") == 3
    assert "truncated" in result.content


def test_search_does_not_follow_a_symlink_out(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("needle outside\n")
    (ws / "leak.txt").symlink_to(tmp_path / "secret.txt")
    assert "outside" not in search(ws, "needle").content


# -- run_command ------------------------------------------------------------------------------


def test_run_command_reports_exit_code_and_output(ws: Path) -> None:
    result = run_command(ws, "echo out; echo err >&2; pwd")
    assert result.ok
    lines = result.content.splitlines()
    assert lines[0] == "exit code 0"
    assert "out" in lines and "err" in lines
    assert str(ws.resolve()) in lines


def test_run_command_failure_is_not_ok(ws: Path) -> None:
    result = run_command(ws, "echo broken; exit 3")
    assert not result.ok
    assert result.content.startswith("exit code 3\n")
    assert "broken" in result.content


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")  # a killed, not yet reaped child is a zombie
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_run_command_timeout_kills_the_group(ws: Path) -> None:
    started = time.monotonic()
    result = run_command(ws, "sleep 30 & echo $! > child.pid; sleep 30", timeout_seconds=1)
    assert time.monotonic() - started < 10
    assert not result.ok
    assert "timed out after 1s" in result.content
    child = int((ws / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_run_command_output_is_capped(ws: Path) -> None:
    result = run_command(ws, "for i in $(seq 1 20000); do echo line-$i; done")
    assert result.ok
    assert "output truncated" in result.content
    assert "line-20000" in result.content
    assert len(result.content) < calls.COMMAND_OUTPUT_CAP_BYTES + 200


def test_run_command_denied_is_a_result(ws: Path) -> None:
    result = run_command(ws, "git push origin main")
    assert not result.ok
    assert result.content.startswith("refusing:")


# -- registry, arguments, dispatch ------------------------------------------------------------


def test_registry_is_ready_for_the_messages_api() -> None:
    assert set(TOOLS) == {
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "search",
        "run_command",
    }
    definitions = tool_definitions()
    json.dumps(definitions)
    for spec, definition in zip(TOOLS.values(), definitions, strict=True):
        assert set(definition) == {"name", "description", "input_schema"}
        assert definition["name"] == spec.name
        assert definition["description"]
        schema = definition["input_schema"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert schema["properties"]
    assert TOOLS["read_file"].input_schema["required"] == ["path"]
    assert TOOLS["edit_file"].input_schema["required"] == ["path", "old", "new"]
    assert TOOLS["run_command"].input_schema["properties"]["timeout_seconds"]["maximum"] == 600


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("read_file", {}, "path: Field required"),
        ("read_file", {"path": 3}, "path: Input should be a valid string"),
        ("read_file", {"path": "a", "limit": 0}, "limit"),
        ("read_file", {"path": "a", "pathh": "b"}, "pathh: Extra inputs are not permitted"),
        ("edit_file", {"path": "a", "old": "", "new": "b"}, "old"),
        ("run_command", {"command": "ls", "timeout_seconds": 100_000}, "timeout_seconds"),
        ("run_command", {"command": ""}, "command"),
        ("search", {"pattern": "x", "glob": None}, "glob"),
        ("write_file", None, "path: Field required"),
        ("write_file", ["a", "b"], "expected an object"),
    ],
)
def test_bad_arguments_are_results(ws: Path, name: str, arguments: Any, message: str) -> None:
    result = execute(ws, name, arguments)
    assert not result.ok
    assert result.content.startswith(f"invalid arguments for {name}")
    assert message in result.content


def test_unknown_tool(ws: Path) -> None:
    result = execute(ws, "delete_everything", {})
    assert not result.ok
    assert "unknown tool 'delete_everything'" in result.content
    assert "read_file" in result.content


def test_missing_workspace(tmp_path: Path) -> None:
    result = execute(tmp_path / "gone", "list_files", {})
    assert not result.ok
    assert "workspace does not exist" in result.content


def test_a_tool_bug_does_not_escape(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(guard: Any, args: Any) -> ToolResult:
        raise RuntimeError("kaboom")

    spec = TOOLS["list_files"]
    monkeypatch.setitem(
        TOOLS, "list_files", ToolSpec(spec.name, spec.description, spec.args_model, boom)
    )
    result = execute(ws, "list_files", {})
    assert not result.ok
    assert "RuntimeError: kaboom" in result.content


def test_os_errors_are_results(ws: Path) -> None:
    (ws / "afile").write_text("x")
    result = write_file(ws, "afile/child.txt", "x")  # a parent that is a file
    assert not result.ok
    assert "write_file failed" in result.content
