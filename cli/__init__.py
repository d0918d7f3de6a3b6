"""`loops`: the command line, a client of the HTTP API (new, status, stop, list, history,
clean, graph, playbook, ...), plus `loops up`, which starts the service here. The one
place in loopworks that prints. It loads the API's public models and `schemas` only."""

from loopworks.cli.app import main

__all__ = ["main"]
