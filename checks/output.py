"""A command's output as the runners keep it: the last bytes written to its pipe, read
while it runs so a flood cannot fill memory, and how many bytes there were in all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

from loopworks.checks.redaction import redact

logger = logging.getLogger(__name__)

# After the command is killed, how long to wait for output still in the pipe.
DRAIN_SECONDS = 2.0
# How long a cancelled step waits for its thread once the commands it ran are killed.
STOPPED_WAIT_SECONDS = 10.0

Result = TypeVar("Result")


class OutputTail:
    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 0)
        self.total = 0
        self._buf = bytearray()
        self._lock = threading.Lock()

    def pump(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            with self._lock:
                self.total += len(chunk)
                self._buf += chunk
                del self._buf[: max(len(self._buf) - self.cap, 0)]

    def render(self, secrets: Iterable[str] = ()) -> str:
        """What was kept, redacted of `secrets` (see `loopworks.checks.redaction`), with a
        note when the start was cut."""
        with self._lock:
            text = self._buf.decode("utf-8", errors="replace")
            truncated = self.total > len(self._buf)
            text = redact(text, secrets, cut_at_start=truncated)
            if truncated:
                return f"[output truncated: last {len(self._buf)} of {self.total} bytes]\n{text}"
            return text


def collect(proc: subprocess.Popen[bytes], cap: int, timeout_s: float) -> tuple[OutputTail, bool]:
    """Read a command's output while it runs, wait up to `timeout_s`, then kill its process
    group (which also ends what it left in the background, holding the pipe open) and
    drain what is left. Answers the kept output and whether the timeout ended it."""
    assert proc.stdout is not None
    tail = OutputTail(cap)
    reader = threading.Thread(target=tail.pump, args=(proc.stdout,), daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    reader.join(timeout=DRAIN_SECONDS)
    if reader.is_alive():
        # A process that escaped the group keeps the pipe open; leave the reader to it.
        logger.warning("output pipe still open %ss after the kill", DRAIN_SECONDS)
    else:
        proc.stdout.close()
    return tail, timed_out


# The commands running now, by the directory they run in (its real path): a step cancelled
# while a thread of its waits on one stops it with `stop_commands_in`, so nothing the step
# started goes on writing into a clone the run's next step (its close) works in.
_running: dict[str, set[subprocess.Popen[bytes]]] = {}
_running_lock = threading.Lock()


@contextlib.contextmanager
def running_in(workdir: Path, proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Known to `stop_commands_in(workdir)` while it runs (its own process group)."""
    key = os.path.realpath(workdir)
    with _running_lock:
        _running.setdefault(key, set()).add(proc)
    try:
        yield
    finally:
        with _running_lock:
            procs = _running.get(key, set())
            procs.discard(proc)
            if not procs:
                _running.pop(key, None)


def stop_commands_in(workdir: Path) -> int:
    """Kill the process group of every command running in `workdir`; how many there were.
    The threads waiting on them return as they would after a timeout."""
    with _running_lock:
        # A command already reaped is left alone: its process group id may be reused.
        procs = [p for p in _running.get(os.path.realpath(workdir), ()) if p.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
    return len(procs)


async def stoppable(workdir: Path, fn: Callable[..., Result], *args: Any) -> Result:
    """`fn(*args)` in a thread, as `asyncio.to_thread`. Cancelled (a stop, a timeout), it
    kills the commands running in `workdir` and waits for the thread before the step
    ends: a command must not outlive its step, writing into a clone that the run's next
    step (its close) works in."""
    call = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        stop_commands_in(workdir)
        await asyncio.wait([call], timeout=STOPPED_WAIT_SECONDS)
        raise
