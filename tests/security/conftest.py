"""The integration fixtures (dev server, stack, bare remote), for exploits run against
real processes."""

from tests.integration.conftest import dev_server, remote, stack

__all__ = ["dev_server", "remote", "stack"]
