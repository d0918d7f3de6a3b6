"""Fixtures the exploit tests here share with the suites they reach into: the
integration suite's dev server and process stack, the workflow suite's harness."""

from tests.integration.conftest import dev_server, remote, stack
from tests.workflows.conftest import harness

__all__ = ["dev_server", "harness", "remote", "stack"]
