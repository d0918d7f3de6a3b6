"""`loops up`: the one command that is not a client of the API but starts the service
here. Its options belong to the launcher (deploy/local.py), whose parser alone reads
them: this module names the command and hands the launcher the words after `up` as
they were given. The launcher is imported only when the command runs, so the client
commands never load the server."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

HELP = "start the service here: Temporal dev server, worker and API"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # No options and no help of its own: `loops up --help` is the launcher's.
    up = sub.add_parser("up", help=HELP, add_help=False)
    up.set_defaults(handler=None)


def run(argv: Sequence[str]) -> int:
    from loopworks.deploy import local

    return local.main(argv, prog="loops up")
