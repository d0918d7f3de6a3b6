"""What proves a repository's work, read from its files (docs/loop.md#the-runs-proof): the
commands it declares in `.loops/verify`, else the test command it plainly uses.

Pure functions over the repository's paths and the text of a few of its files
(`PROOF_FILES`, read at the run's base commit by the workspace step), so every case is a
unit test. Detection names only what a repository's own files show, never a guess: a
`test` target in the Makefile, a `test` script in package.json, a Cargo or Go module,
pytest's configuration, test files unittest finds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from loopworks.schemas.proof import MAX_PROOF_COMMANDS, PROOF_COMMAND_MAX_CHARS, PROOF_FILE

MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
PYTHON_CONFIG = ("pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini")
# The files detection reads, at the repository's root; the rest it knows by their paths.
PROOF_FILES = (PROOF_FILE, *MAKEFILES, "package.json", *PYTHON_CONFIG)

# What detection reads of each file: a repository's file is untrusted and may be huge;
# a test setup is stated near the top of any file that has one.
READ_CAP_CHARS = 1_000_000
# A `test:` rule (not `test := value`, an assignment), at the start of a line.
_MAKE_TEST = re.compile(r"^test\s*:(?!=)", re.MULTILINE)
# What `npm init` writes when a package has no tests.
_NPM_NO_TEST = "no test specified"
# pytest's own configuration, in each file that can hold it.
_PYTEST_SECTIONS = {
    "pyproject.toml": re.compile(r"^\[tool\.pytest\.ini_options\]", re.MULTILINE),
    "setup.cfg": re.compile(r"^\[tool:pytest\]", re.MULTILINE),
    "tox.ini": re.compile(r"^\[pytest\]", re.MULTILINE),
    "pytest.ini": re.compile(r"^\[pytest\]", re.MULTILINE),
}
# Test modules as unittest's discovery and pytest name them.
_TEST_MODULE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")
TEST_DIRS = ("tests", "test")


@dataclass(frozen=True)
class Detected:
    """The commands a repository plainly uses to test itself, and what showed them."""

    commands: list[str] = field(default_factory=list)
    basis: list[str] = field(default_factory=list)


def declared_commands(text: str) -> list[str]:
    """The commands of a `.loops/verify` file: one a line; blank lines and `#` comments
    are skipped. At most `MAX_PROOF_COMMANDS`, each cut at `PROOF_COMMAND_MAX_CHARS`:
    the file is the repository's, and a request would refuse more."""
    commands = []
    for line in text[:READ_CAP_CHARS].splitlines():
        command = line.strip()
        if command and not command.startswith("#") and "\x00" not in command:
            commands.append(command[:PROOF_COMMAND_MAX_CHARS])
    return commands[:MAX_PROOF_COMMANDS]


def detect(paths: Collection[str], texts: Mapping[str, str]) -> Detected:
    """The test commands `paths` (every file of the tree) and `texts` (the text of those of
    `PROOF_FILES` it has) show. A Makefile's `test` target is the project's own entry
    point and stands alone; otherwise every ecosystem found adds its command."""
    texts = {name: text[:READ_CAP_CHARS] for name, text in texts.items()}
    for name in MAKEFILES:
        if name in texts and _MAKE_TEST.search(texts[name]):
            return Detected(["make test"], [f"{name} has a `test` target"])
    found = Detected()
    if _npm_test(texts.get("package.json")):
        _add(found, "npm test", "package.json has a `test` script")
    if "Cargo.toml" in paths:
        _add(found, "cargo test", "Cargo.toml")
    if "go.mod" in paths:
        _add(found, "go test ./...", "go.mod")
    _python(found, paths, texts)
    return found


def _add(found: Detected, command: str, basis: str) -> None:
    found.commands.append(command)
    found.basis.append(basis)


def _npm_test(text: str | None) -> bool:
    if text is None:
        return False
    try:
        package = json.loads(text)
    except ValueError:
        return False
    scripts = package.get("scripts") if isinstance(package, dict) else None
    test = scripts.get("test") if isinstance(scripts, dict) else None
    return isinstance(test, str) and bool(test.strip()) and _NPM_NO_TEST not in test


def _python(found: Detected, paths: Collection[str], texts: Mapping[str, str]) -> None:
    """pytest when the repository configures it (or has a conftest.py), else unittest's
    discovery where the test modules are."""
    configured = [
        name for name, section in _PYTEST_SECTIONS.items() if section.search(texts.get(name, ""))
    ]
    conftest = [p for p in paths if p == "conftest.py" or p.endswith("/conftest.py")]
    if configured or conftest:
        what = configured[0] if configured else conftest[0]
        basis = f"{what} configures pytest" if configured else f"{what} (pytest)"
        _add(found, "python3 -m pytest -q", basis)
        return
    modules = [p for p in paths if _TEST_MODULE.search(p)]
    if not modules:
        return
    before = len(found.commands)
    at_root = [p for p in modules if "/" not in p]
    packages = {p.rpartition("/")[0] for p in paths if p.endswith("/__init__.py")}
    if at_root:
        _add(found, "python3 -m unittest", f"test modules at the root ({at_root[0]}, unittest)")
    for folder in TEST_DIRS:
        inside = [p for p in modules if p.startswith(f"{folder}/")]
        if not inside:
            continue
        if folder in packages:
            if at_root:
                continue  # a package: the discovery from the root finds it already
            command = f"python3 -m unittest discover -s {folder} -t ."
        else:
            command = f"python3 -m unittest discover -s {folder}"
        _add(found, command, f"test modules in {folder}/ ({inside[0]}, unittest)")
    if len(found.commands) == before:
        # Test modules elsewhere, in packages: discovery from the root walks packages.
        _add(found, "python3 -m unittest", f"test modules ({modules[0]}, unittest)")
