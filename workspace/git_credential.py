"""The git credential helper of every git process loopworks runs (workspace/runner.py):
`python -m loopworks.workspace.git_credential get`.

git writes what it wants (`protocol=`, `host=`, ... one per line) to the helper's stdin;
the helper answers `username=` and `password=` only when `schemas/git_credentials.py`
says this host has a credential, reading the credentials from LOOPS_GIT_CREDENTIALS in its
environment: a secret is never on a command line, in a URL or in a repository's config.
Every other credential source (other helpers, askpass programs) is turned off where git
is started, so this is the only one. `store` and `erase` are ignored: nothing is saved.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from loopworks.schemas.git_credentials import ENV_VAR, credential_for, parse_credentials


def read_request(stream: TextIO) -> dict[str, str]:
    """git's `key=value` lines up to a blank line or the end; later keys win, and
    `key[]=` lists (wwwauth, capability) are of no use here and dropped."""
    request: dict[str, str] = {}
    for line in stream:
        line = line.rstrip("\n")
        if not line:
            break
        key, sep, value = line.partition("=")
        if sep and not key.endswith("[]"):
            request[key] = value
    return request


def answer(action: str, request: dict[str, str], environ: dict[str, str]) -> str:
    """What the helper writes back: the credential's two lines, or nothing."""
    if action != "get":
        return ""
    try:
        credentials = parse_credentials(environ.get(ENV_VAR))
    except ValueError:
        return ""  # the entry points refuse a malformed value before git ever runs
    found = credential_for(request, credentials)
    if found is None:
        return ""
    return f"username={found.username}\npassword={found.token}\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    action = args[-1] if args else ""
    request = read_request(sys.stdin)
    sys.stdout.write(answer(action, request, dict(os.environ)))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
