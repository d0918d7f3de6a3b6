"""The CLI is a client of the API: it loads the API's public models and `schemas`, never
the server's internals (workflows, activities, Temporal, FastAPI, the service's Settings).

Checked in a fresh interpreter, so modules other tests imported do not hide a leak.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.unit

# What the CLI may load of loopworks: its own package, the API's public models and the
# shared schemas (but not the service's Settings).
ALLOWED_PREFIXES = ("loopworks.cli", "loopworks.schemas")
ALLOWED_MODULES = frozenset({"loopworks", "loopworks.api", "loopworks.api.models"})
FORBIDDEN_MODULES = frozenset({"loopworks.schemas.settings"})
# Third-party packages only the server needs.
FORBIDDEN_PACKAGES = ("temporalio", "pydantic_ai", "fastapi", "pydantic_settings", "anthropic")

# Every CLI module, `--help`, and commands that stop at an unreachable API or before any
# request (so imports a command makes lazily are counted too).
PROBE = textwrap.dedent(
    """
    import contextlib, io, json, pkgutil, sys, importlib
    import loopworks.cli
    from loopworks.cli.app import main

    for info in pkgutil.walk_packages(loopworks.cli.__path__, "loopworks.cli."):
        importlib.import_module(info.name)
    unreachable = ["--url", "http://127.0.0.1:9"]
    argvs = [
        ["--help"],
        [*unreachable, "clean", "some-run", "--yes"],
        [*unreachable, "status", "some-run", "--follow"],
        [*unreachable, "history", "some-run"],
        [*unreachable, "list"],
    ]
    for argv in argvs:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                main(argv)
            except SystemExit:
                pass
    print(json.dumps(sorted(sys.modules)))
    """
)


def loaded_modules() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])
    return modules


def test_the_cli_loads_only_the_apis_public_models_and_schemas() -> None:
    modules = loaded_modules()
    internal = [
        name
        for name in modules
        if (name == "loopworks" or name.startswith("loopworks."))
        and name not in ALLOWED_MODULES
        and not name.startswith(ALLOWED_PREFIXES)
    ]
    forbidden = [name for name in modules if name in FORBIDDEN_MODULES]
    third_party = [name for name in modules if name.split(".")[0] in FORBIDDEN_PACKAGES]
    assert internal == [], f"the CLI loads server internals: {internal}"
    assert forbidden == [], f"the CLI loads the service's settings: {forbidden}"
    assert sorted({name.split(".")[0] for name in third_party}) == []
