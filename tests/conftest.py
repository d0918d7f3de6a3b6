"""Shared fixtures: real Temporal servers from the pip-installed binaries."""

from __future__ import annotations

import os
import runpy
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from loopworks.deploy.binaries import find_binary
from loopworks.deploy.search_attributes import register_search_attributes

# Workers the tests start run commands unsandboxed unless a test asks for the sandbox:
# pytest's temporary directories are out of the sandbox user's reach when the suite runs
# as root. tests/*/test_sandbox*.py and the sandboxed runs set LOOPS_SANDBOX=auto.
os.environ.setdefault("LOOPS_SANDBOX", "off")

# The suite's workers answer with the offline model, chosen as an operator chooses it: a
# worker given neither LOOPS_LLM nor a key refuses to start. Tests of that refusal start
# the worker without it (tests/worker/test_startup.py).
os.environ.setdefault("LOOPS_LLM", "offline")

# The custodiet's audit during the work is drawn from a run's id (random in the suite): off
# unless a test asks for it (a run's `tool_audit_probability`, or the setting), so the
# custodiet's calls and events of every other test stay the same from run to run.
os.environ.setdefault("LOOPS_TOOL_AUDIT_PROBABILITY", "0")

# The suite's repositories are local ones under the temporary directory, some asked over
# file:// as a server would be: allowed the way an operator allows them, by settings
# (workspace/origin_policy.py). Tests of the policy itself pass their own settings; a test
# that must start without them (`loops up`'s own default) removes them.
os.environ.setdefault("LOOPS_LOCAL_ROOTS", os.path.realpath(tempfile.gettempdir()))
os.environ.setdefault("LOOPS_ALLOWED_SCHEMES", "https,ssh,file")

EDITABLE_INSTALL = Path(__file__).resolve().parents[1] / "scripts" / "editable_install.py"


def pytest_configure(config: pytest.Config) -> None:
    """A module added since the strict editable install is not importable until the
    install is refreshed: say so once, with the command, before anything fails on it."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller checked
        return
    check = runpy.run_path(str(EDITABLE_INSTALL))
    tree = check["link_tree"](check["ROOT"])
    if tree is not None and (problems := check["stale"](check["ROOT"], tree)):
        raise pytest.UsageError(
            "the editable install does not match the checkout: "
            + "; ".join(problems)
            + f". Refresh it: {check['INSTALL']}"
        )


@pytest.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=find_binary("temporal-test-server"),
    )
    await register_search_attributes(env.client, "default")
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port a connection is refused on for the whole test: bound and never
    listening. A port merely free when looked up can be taken meanwhile by a server
    another test starts, which then answers instead of refusing."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
