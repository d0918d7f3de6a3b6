"""`loops up`'s supervision: when one of its processes ends, it says which and why."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from loopworks.deploy.local import LocalStack
from loopworks.schemas.settings import Settings


def test_an_exited_process_is_named_with_how_it_ended_and_its_log(tmp_path: Path) -> None:
    stack = LocalStack(Settings(LOOPS_DATA_DIR=tmp_path), temporal_port=1, ui_port=2)
    quick = [sys.executable, "-c", "raise SystemExit(3)"]
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]
    stack._spawn("worker", quick, {})
    stack._spawn("api", slow, {})
    try:
        worker, api = stack.processes
        worker.wait(timeout=30)
        assert not stack.alive()
        assert stack.exited() == [
            f"worker (pid {worker.pid}) exited with code 3; its log: {tmp_path}/logs/worker.log"
        ]
        api.send_signal(signal.SIGKILL)
        api.wait(timeout=30)
        assert stack.exited()[1] == (
            f"api (pid {api.pid}) killed by signal 9; its log: {tmp_path}/logs/api.log"
        )
    finally:
        stack.stop()
