"""Where the CLI finds the API, read once in `main` from the flags and the environment.

The CLI is a client of the API and reads only these variables (flags win over them):

- `LOOPS_API_URL`: the API's base URL (default `http://127.0.0.1:8000`)
- `LOOPS_API_TOKEN`: sent as `Authorization: Bearer <token>` (the API wants one of its
  `LOOPS_API_TOKENS` when that is set)

It never reads the service's `Settings` (data directory, Temporal, model keys): those
describe the API and worker processes, and a bad one must not break `loops status`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_API_URL = "http://127.0.0.1:8000"
URL_VARIABLE = "LOOPS_API_URL"
TOKEN_VARIABLE = "LOOPS_API_TOKEN"


@dataclass(frozen=True)
class CliConfig:
    api_url: str
    token: str | None

    @classmethod
    def load(
        cls,
        url: str | None = None,
        token: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CliConfig:
        """Flags win over `LOOPS_API_URL` / `LOOPS_API_TOKEN`, which win over the default."""
        env = os.environ if environ is None else environ
        api_url = url or env.get(URL_VARIABLE) or DEFAULT_API_URL
        return cls(api_url=api_url.rstrip("/"), token=token or env.get(TOKEN_VARIABLE) or None)
