"""Fixtures for tests against real processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stack import DevServer, Stack, bare_remote


@pytest.fixture(scope="session")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    server = DevServer.start(tmp_path_factory.mktemp("temporal"))
    try:
        yield server
    finally:
        server.process.stop()


@pytest.fixture
def stack(dev_server: DevServer, tmp_path: Path) -> Iterator[Stack]:
    """Processes started through this fixture are stopped (by PID) after the test."""
    running = Stack(server=dev_server, data_dir=tmp_path / "data", logs=tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop_all()


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare origin with one commit on `main` (a fresh one per test)."""
    return bare_remote(tmp_path)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """Each phase's report on its test (`rep_setup`, `rep_call`): a fixture's teardown
    reads whether its test failed (the browser tests' screenshot on failure)."""
    report: pytest.TestReport = yield
    setattr(item, f"rep_{report.when}", report)
    return report
