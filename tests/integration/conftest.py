"""Fixtures for tests against real processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stack import DevServer, Stack, git


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
    bare, scratch = tmp_path / "remote.git", tmp_path / "scratch"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("clone", "--quiet", str(bare), str(scratch))
    (scratch / "README.md").write_text("# demo project\n")
    git("add", "README.md", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "Initial commit", cwd=scratch)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=scratch)
    return bare
