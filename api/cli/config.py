"""Where the CLI finds the API, read once in `main` from the flags and the environment.

The service's `Settings` describes the API and worker processes; the CLI is a client of
the API and needs only its address and token, so it keeps this much smaller record.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_API_URL = "http://127.0.0.1:8000"


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
        api_url = url or env.get("LOOPS_API_URL") or DEFAULT_API_URL
        return cls(api_url=api_url.rstrip("/"), token=token or env.get("LOOPS_API_TOKEN") or None)


def workspaces_dir() -> Path:
    """`$LOOPS_DATA_DIR/workspaces`, exactly as the worker computes it.

    Only `clean` needs it, so the service's Settings are read there and nowhere else
    in the CLI: an unrelated bad variable must not break `loops status`.
    """
    from loopworks.schemas.settings import Settings

    return Settings().workspaces_dir
