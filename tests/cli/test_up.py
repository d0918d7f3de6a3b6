"""`loops up` hands the words after `up` to the launcher's parser, the one that reads
them: an unknown option is that parser's usage error, and each value reaches the
launcher as given, even one that reads like an option."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from loopworks.cli.app import main
from loopworks.deploy import local
from loopworks.deploy.demo import DEMO_TASK

pytestmark = pytest.mark.unit

USAGE = "usage: loops up [-h] [--demo [TASK]] [--exit-after-demo]"


def _no_process(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError(f"nothing may start: {args}")


@pytest.fixture
def launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The launcher with its stack stood in for (nothing starts) and its demo recorded:
    yields the tasks the demo was given. The launcher installs its own Ctrl-C handlers;
    pytest's are put back after."""
    tasks: list[str] = []

    def run_demo(base: str, task: str, *args: Any) -> dict[str, str]:
        tasks.append(task)
        return {"status": "completed"}

    monkeypatch.setenv("LOOPS_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(subprocess, "Popen", _no_process)
    monkeypatch.setattr(local.LocalStack, "start", lambda stack: None)
    monkeypatch.setattr(local, "run_demo", run_demo)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield tasks
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize(
    ("argv", "task"),
    [
        (["--demo", "--exit-after-demo"], DEMO_TASK),
        (["--exit-after-demo", "--demo", "fix the README"], "fix the README"),
        # A task that reads like an option: parsed twice, it became the option.
        (["--demo=--exit-after-demo", "--exit-after-demo"], "--exit-after-demo"),
        (["--demo=-h", "--exit-after-demo"], "-h"),
    ],
)
def test_the_values_given_to_loops_up_reach_the_launcher_unchanged(
    launcher: list[str], argv: list[str], task: str
) -> None:
    assert main(["up", *argv]) == 0
    assert launcher == [task]


def test_an_unknown_option_to_loops_up_is_its_one_parsers_usage_error(
    launcher: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["up", "--demo", "a task", "--bogus"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(USAGE), said
    assert "loops up: error: unrecognized arguments: --bogus" in said
    assert launcher == []


def test_loops_up_help_is_the_launchers(
    launcher: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["up", "--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith(USAGE) and "run one task end to end first" in shown
    assert launcher == []


def test_other_commands_still_refuse_unknown_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["list", "--bogus"])
    assert exited.value.code == 2
    assert "loops: error: unrecognized arguments: --bogus" in capsys.readouterr().err
