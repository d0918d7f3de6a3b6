"""The integration suite's fixtures (a dev server, a stack of processes), for the exploit
tests here that run against real processes."""

from tests.integration.conftest import dev_server, remote, stack

__all__ = ["dev_server", "remote", "stack"]
