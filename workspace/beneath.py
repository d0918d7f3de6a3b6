"""Opening a path beneath a directory without ever leaving it: the kernel's `openat2(2)`
with `RESOLVE_BENEATH`, else a walk of its components, one `O_NOFOLLOW` open at a time.

Both answer the same for the same tree: symlinks whose target stays beneath the directory
are followed when asked (`follow=True`), and refused otherwise; an absolute symlink, a
magic link (/proc/<pid>/fd/...) or a `..` that climbs above the directory is always
refused, with `Escape`. The walk is the fallback for kernels before 5.6 and for seccomp
filters that answer ENOSYS or EPERM for a syscall they do not know.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat
import sys
from collections import deque
from collections.abc import Callable

__all__ = ["Escape", "open_beneath"]

# openat2's number is the same on every architecture Linux added it to after 5.1.
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
# What Linux itself allows (MAXSYMLINKS): a longer chain is a loop.
_MAX_LINKS = 40


class Escape(OSError):
    """The path leads out of the directory it was opened beneath, or through a symlink
    where none is allowed."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _load_syscall() -> Callable[..., int] | None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    call = libc.syscall
    call.restype = ctypes.c_long
    return call  # type: ignore[no-any-return]


_syscall = _load_syscall()
# None: not tried yet; then whether the kernel (and any seccomp filter) lets it through.
_kernel_has_openat2: bool | None = None


def _openat2(dirfd: int, path: str, flags: int, mode: int, resolve: int) -> int | None:
    """The fd, or None when openat2 is unavailable; OSError as the kernel answered."""
    global _kernel_has_openat2
    if _syscall is None or _kernel_has_openat2 is False:
        return None
    # The kernel refuses a mode unless the open may create.
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
    fd = _syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    if fd >= 0:
        _kernel_has_openat2 = True
        return int(fd)
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EPERM) and not _kernel_has_openat2:
        _kernel_has_openat2 = False  # an older kernel, or a seccomp filter that refuses it
        return None
    if code == errno.EXDEV:
        raise Escape(code, "leads out of the workspace (through a symlink or '..')", path)
    if code == errno.ELOOP:
        raise Escape(code, "goes through a symbolic link where none is allowed", path)
    raise OSError(code, os.strerror(code), path)


def open_beneath(dirfd: int, path: str, flags: int, *, follow: bool, mode: int = 0o666) -> int:
    """Open `path` (relative, already checked) beneath the directory `dirfd` with `flags`.

    `follow`: whether symlinks that stay beneath `dirfd` are followed; without it any
    symlink on the way, the last component's included, is refused. Raises `Escape` for
    a path that would leave `dirfd` (or meet a symlink without `follow`), OSError as
    open(2) would (FileNotFoundError, NotADirectoryError, ...) otherwise."""
    resolve = _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
    if not follow:
        resolve |= _RESOLVE_NO_SYMLINKS
    fd = _openat2(dirfd, path, flags, mode, resolve)
    if fd is not None:
        return fd
    return _walk_open(dirfd, path, flags, follow, mode)


def uses_openat2() -> bool | None:
    """Whether the last open went through openat2 (None: none yet). For tests."""
    return _kernel_has_openat2


def force_fallback(off: bool) -> None:
    """Make every later open walk components instead of asking openat2 (tests)."""
    global _kernel_has_openat2
    _kernel_has_openat2 = False if off else None


def _walk_open(dirfd: int, path: str, flags: int, follow: bool, mode: int) -> int:
    """`open_beneath` without openat2: each directory opened `O_NOFOLLOW | O_DIRECTORY`
    relative to the one before, each symlink read and its target walked in its place."""
    pending = deque(part for part in path.split("/") if part not in ("", "."))
    stack = [os.dup(dirfd)]  # the directories from `dirfd` down to where the walk is
    links = 0
    try:
        if not pending:
            return _final(stack[-1], ".", flags, mode)
        while pending:
            name = pending.popleft()
            if name == "..":
                if len(stack) == 1:
                    raise Escape(errno.EXDEV, "leads out of the workspace ('..')", path)
                os.close(stack.pop())
                continue
            here = stack[-1]
            try:
                st = os.stat(name, dir_fd=here, follow_symlinks=False)
            except FileNotFoundError:
                if pending or not flags & os.O_CREAT:
                    raise
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                if not follow:
                    raise Escape(errno.ELOOP, "goes through a symbolic link", path)
                links += 1
                if links > _MAX_LINKS:
                    raise Escape(errno.ELOOP, "too many levels of symbolic links", path)
                target = os.readlink(name, dir_fd=here)
                if target.startswith("/"):
                    raise Escape(errno.EXDEV, "leads out of the workspace (absolute link)", path)
                pending.extendleft(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            if not pending:
                return _final(here, name, flags, mode)
            # A symlink swapped in since the stat fails here (ELOOP): refused, not followed.
            try:
                stack.append(
                    os.open(
                        name,
                        os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=here,
                    )
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise Escape(errno.ELOOP, "goes through a symbolic link", path) from exc
                raise
        return _final(stack[-1], ".", flags, mode)
    finally:
        for fd in stack:
            os.close(fd)


def _final(here: int, name: str, flags: int, mode: int) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=here)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Escape(errno.ELOOP, "goes through a symbolic link", name) from exc
        raise
