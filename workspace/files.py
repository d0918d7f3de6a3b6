"""Every read, write, rename, delete, mkdir and listing the worker makes in a workspace.

A workspace holds what a repository brought and what a model left: either may be a
symlink to anything (`artifact.md -> /proc/self/environ`, `.loops/run.json -> ~/.bashrc`),
a FIFO, or a file too large to read. The worker's own process reads and writes there
outside any sandbox, so it does it only through here:

- Paths are relative to the workspace root, without `..`, NUL or a leading `/` or `~`.
- Reads follow a symlink only while it stays inside the workspace (what a checkout of the
  tree would show); a link out of it, absolute or by `..`, or a magic link, is refused
  (`Refused`). Only regular files are read (a FIFO would hang the worker), and at most a
  cap of bytes: past it, each caller says whether that is an error (`TooLarge`) or the
  text is cut.
- Writes, renames, deletes and mkdirs follow no symlink at all, not even one inside: a
  symlink on the way or at the path itself is refused. A write goes to a new file in the
  same directory (opened relative to the directory's fd) and is renamed over the path, so
  it never writes through whatever is there; an existing file's mode is kept.

The directories are opened beneath the root with `openat2(2)` where the kernel has it,
else one component at a time (`workspace/beneath.py`): a symlink swapped in between a
check and a use is still refused. The root itself is the worker's own path, trusted.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from loopworks.workspace.beneath import Escape, open_beneath

__all__ = [
    "Refused",
    "TooLarge",
    "UnsafePath",
    "checked",
    "create_text",
    "is_file",
    "lexists",
    "listdir",
    "lstat",
    "mkdir",
    "open_read",
    "read_bytes",
    "read_text",
    "readlink",
    "remove",
    "rename",
    "sha256",
    "symlink",
    "tree_bytes",
    "unlink",
    "walk",
    "write_bytes",
    "write_text",
]

_READ = os.O_RDONLY | os.O_NONBLOCK  # O_NONBLOCK: opening a FIFO returns at once
_DIR = os.O_RDONLY | os.O_DIRECTORY
_CHUNK = 1 << 16


class UnsafePath(Exception):
    """A path in a workspace the worker will not touch as asked; the message says why."""

    def __init__(self, relpath: str, why: str) -> None:
        super().__init__(f"refusing {relpath!r} in the workspace: {why}")
        self.relpath = relpath
        self.why = why


class Refused(UnsafePath):
    """The path leads out of the workspace, through a symlink where none may be, or to
    something that is not a regular file or directory."""


class TooLarge(UnsafePath):
    """The file is larger than its reader's cap."""


def checked(relpath: str) -> str:
    """`relpath` normalised ("a/./b/" is "a/b"; "" and "." are the root), or `Refused`."""
    if not isinstance(relpath, str) or "\x00" in relpath:
        raise Refused(str(relpath), "not a path")
    if relpath.startswith(("/", "~")) or os.path.isabs(relpath):
        raise Refused(relpath, "an absolute path; paths are relative to the workspace root")
    parts = [part for part in PurePosixPath(relpath).parts if part != "."]
    if ".." in parts:
        raise Refused(relpath, "it contains '..'")
    return "/".join(parts)


@contextlib.contextmanager
def _fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def _opened(root: Path, relpath: str, flags: int, *, follow: bool) -> Iterator[int]:
    """`relpath` opened beneath `root`; Escape becomes `Refused`."""
    with _fd(os.open(root, _DIR | os.O_CLOEXEC)) as top:
        try:
            fd = open_beneath(top, relpath or ".", flags, follow=follow)
        except Escape as exc:
            raise Refused(relpath, exc.strerror or "leads out of the workspace") from exc
    with _fd(fd) as opened:
        yield opened


# -- reading ------------------------------------------------------------------------


@contextlib.contextmanager
def _regular(root: Path, relpath: str, follow: bool) -> Iterator[tuple[int, int]]:
    """(fd, size) of the regular file at `relpath`. FileNotFoundError when nothing is
    there (a dangling link inside included), IsADirectoryError for a directory."""
    relpath = checked(relpath)
    with _opened(root, relpath, _READ, follow=follow) as fd:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", relpath)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(relpath, "not a regular file")
        yield fd, st.st_size


def read_bytes(
    root: Path,
    relpath: str,
    cap: int,
    *,
    follow: bool = True,
    truncate: bool = False,
    missing: bytes | None = None,
) -> bytes:
    """The file's bytes: all of them, else `TooLarge` (or, with `truncate`, the first `cap`);
    `missing` (when given) for a path with nothing there, else FileNotFoundError.

    `follow`: symlinks that stay inside are followed (False: any symlink is refused)."""
    try:
        return _read(root, relpath, cap, follow, truncate)
    except FileNotFoundError:
        if missing is None:
            raise
        return missing


def _read(root: Path, relpath: str, cap: int, follow: bool, truncate: bool) -> bytes:
    with _regular(root, relpath, follow) as (fd, size):
        if size > cap and not truncate:
            raise TooLarge(relpath, f"it is {size} bytes, and at most {cap} are read here")
        chunks, left = [], cap + 1  # one more: a file that grew past the cap since fstat
        while left > 0 and (chunk := os.read(fd, min(_CHUNK, left))):
            chunks.append(chunk)
            left -= len(chunk)
    data = b"".join(chunks)
    if len(data) > cap:
        if not truncate:
            raise TooLarge(relpath, f"it is more than the {cap} bytes read here")
        data = data[:cap]
    return data


def read_text(
    root: Path,
    relpath: str,
    cap: int,
    *,
    follow: bool = True,
    truncate: bool = False,
    missing: str | None = None,
) -> str:
    """`read_bytes` as text, as Path.read_text gives it (UTF-8, undecodable bytes replaced,
    universal newlines); `missing` (when given) for a path with nothing there."""
    try:
        data = _read(root, relpath, cap, follow, truncate)
    except FileNotFoundError:
        if missing is None:
            raise
        return missing
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


@contextlib.contextmanager
def open_read(root: Path, relpath: str, *, follow: bool = True) -> Iterator[tuple[BinaryIO, int]]:
    """(binary reader, size) of the regular file at `relpath`, for a caller that reads in
    pieces and keeps its own caps; FileNotFoundError and IsADirectoryError as `read_bytes`."""
    with _regular(root, relpath, follow) as (fd, size), os.fdopen(os.dup(fd), "rb") as reader:
        yield reader, size


def is_file(root: Path, relpath: str, *, follow: bool = True) -> bool:
    """Whether a regular file is at `relpath` (False: nothing, a directory, a dangling
    link inside); `Refused` for a path that leads out."""
    try:
        with _regular(root, relpath, follow):
            return True
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False


def sha256(root: Path, relpath: str, *, follow: bool = True) -> str | None:
    """Hex SHA-256 of the file's bytes, None when there is no file there."""
    digest = hashlib.sha256()
    try:
        with _regular(root, relpath, follow) as (fd, _):
            while chunk := os.read(fd, _CHUNK):
                digest.update(chunk)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    return digest.hexdigest()


def walk(root: Path, relpath: str = "") -> Iterator[tuple[str, bool]]:
    """(relative path, is a symlink) of every file and symlink under the directory at
    `relpath` (followed only inside), recursively, sorted, `.git` skipped, symlinks not
    descended into. A path to a file yields that file alone."""
    relpath = checked(relpath)
    if is_file(root, relpath):
        yield relpath, False
        return
    with _opened(root, relpath, _DIR, follow=True) as top:
        for dirpath, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d.lower() != ".git")
            links = [d for d in dirnames if _is_link(d, dirfd)]
            dirnames[:] = [d for d in dirnames if d not in links]
            here = PurePosixPath(relpath, dirpath)
            for name in sorted([*filenames, *links]):
                if name.lower() != ".git":
                    yield (here / name).as_posix(), name in links or _is_link(name, dirfd)


def listdir(root: Path, relpath: str = "") -> list[str]:
    """The names in the directory at `relpath`, sorted; no symlink on the way or at it.
    FileNotFoundError when there is no directory there."""
    relpath = checked(relpath)
    try:
        with _opened(root, relpath, _DIR, follow=False) as fd:
            return sorted(os.listdir(fd))
    except NotADirectoryError as exc:
        raise FileNotFoundError(errno.ENOTDIR, "not a directory", relpath) from exc


def tree_bytes(root: Path, relpath: str) -> int:
    """Bytes of what is at `relpath`, as `du --apparent-size -s` counts them: a file's
    size, a directory's files together, a symlink's own (never followed, nor any on the
    way); 0 when nothing is there."""
    st = lstat(root, relpath)
    if st is None:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    total = 0
    with _opened(root, checked(relpath), _DIR, follow=False) as top:
        for _, dirnames, filenames, dirfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in [*filenames, *(d for d in dirnames if _is_link(d, dirfd))]:
                with contextlib.suppress(FileNotFoundError):  # removed while measured
                    total += os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_size
    return total


def _is_link(name: str, dirfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


# -- writing ------------------------------------------------------------------------


@contextlib.contextmanager
def _parent(root: Path, relpath: str, create: bool) -> Iterator[tuple[int, str]]:
    """(fd of the directory holding `relpath`, its last component), no symlink on the
    way; its missing directories made when `create`."""
    relpath = checked(relpath)
    if not relpath:
        raise Refused(relpath, "the workspace root itself")
    head, _, name = relpath.rpartition("/")
    with _fd(os.open(root, _DIR | os.O_CLOEXEC)) as top:
        try:
            fd = open_beneath(top, head or ".", _DIR, follow=False)
        except Escape as exc:
            raise Refused(relpath, "a directory on the way is a symbolic link") from exc
        except FileNotFoundError:
            if not create:
                raise
            fd = _made(root, head)
    with _fd(fd) as opened:
        yield opened, name


def _made(root: Path, relpath: str) -> int:
    """The directory at `relpath`, made where missing, one component at a time."""
    fd = os.open(root, _DIR | os.O_CLOEXEC)
    try:
        for part in relpath.split("/"):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            try:
                below = open_beneath(fd, part, _DIR, follow=False)
            except Escape as exc:
                raise Refused(relpath, f"{part!r} is a symbolic link") from exc
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _no_link_at(dirfd: int, name: str, relpath: str) -> os.stat_result | None:
    """What is at `name` now (None: nothing); `Refused` for a symlink."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise Refused(relpath, "it is a symbolic link; loopworks writes through none")
    return st


def write_bytes(root: Path, relpath: str, data: bytes, *, mode: int | None = None) -> bool:
    """Replace (or create) the file at `relpath` with `data`, its parents made; whether it
    existed. Written beside it and renamed over it: never through a link. Its mode is
    `mode` when given, else an existing file's."""
    with _parent(root, relpath, create=True) as (dirfd, name):
        st = _no_link_at(dirfd, name, relpath)
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", relpath)
        temp = f".{name[:100]}.{uuid.uuid4().hex}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            with _fd(os.open(temp, flags, 0o666, dir_fd=dirfd)) as fd:
                if mode is not None:
                    os.fchmod(fd, mode)
                elif st is not None:
                    os.fchmod(fd, stat.S_IMODE(st.st_mode))
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dirfd)
            raise
        return st is not None


def write_text(root: Path, relpath: str, text: str) -> bool:
    return write_bytes(root, relpath, text.encode("utf-8"))


def create_text(root: Path, relpath: str, text: str) -> bool:
    """Write `text` to a new file at `relpath`; False, writing nothing, when anything (a
    symlink included) is there already."""
    with _parent(root, relpath, create=True) as (dirfd, name):
        # O_EXCL never follows a symlink: one there is "exists", like any file.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o666, dir_fd=dirfd)
        except FileExistsError:
            return False
        with _fd(fd):
            view = memoryview(text.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
        return True


def mkdir(root: Path, relpath: str) -> None:
    """The directory at `relpath` and its parents, made where missing."""
    relpath = checked(relpath)
    if relpath:
        os.close(_made(root, relpath))


def lexists(root: Path, relpath: str) -> bool:
    """Whether anything, a symlink included, is at `relpath`; no symlink on the way."""
    if not checked(relpath):
        return True  # the root
    try:
        with _parent(root, relpath, create=False) as (dirfd, name):
            os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def lstat(root: Path, relpath: str) -> os.stat_result | None:
    """What is at `relpath` itself (a symlink as a link), None when nothing is; `Refused`
    when a directory on the way is a symlink."""
    if not checked(relpath):
        return os.stat(root)
    try:
        with _parent(root, relpath, create=False) as (dirfd, name):
            return os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None


def readlink(root: Path, relpath: str) -> str | None:
    """The target of the symlink at `relpath`, None when something else or nothing is
    there; no symlink on the way."""
    try:
        with _parent(root, relpath, create=False) as (dirfd, name):
            return os.readlink(name, dir_fd=dirfd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # not a symlink
            return None
        raise


def symlink(root: Path, relpath: str, target: str) -> None:
    """A symlink at `relpath` to `target` (a name it holds, never followed here), its
    parents made; nothing may be at `relpath` yet."""
    with _parent(root, relpath, create=True) as (dirfd, name):
        os.symlink(target, name, dir_fd=dirfd)


def unlink(root: Path, relpath: str, *, missing_ok: bool = True) -> None:
    """Remove the file or symlink at `relpath` (a symlink itself, never its target)."""
    try:
        with _parent(root, relpath, create=False) as (dirfd, name):
            os.unlink(name, dir_fd=dirfd)
    except (FileNotFoundError, NotADirectoryError):
        if not missing_ok:
            raise


def remove(root: Path, relpath: str) -> None:
    """Remove whatever is at `relpath`: a file, a symlink (not its target) or a whole
    directory (whose symlinks are removed, never followed); nothing there is fine."""
    try:
        with _parent(root, relpath, create=False) as (dirfd, name):
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(name, dir_fd=dirfd)  # fd-based on Linux: follows no link
            else:
                os.unlink(name, dir_fd=dirfd)
    except (FileNotFoundError, NotADirectoryError):
        return


def rename(root: Path, source: str, target: str) -> None:
    """Move `source` (a file, a directory or a symlink itself) to `target`, whose parents
    are made; nothing may be at `target` but a file or an empty directory, never a link."""
    with (
        _parent(root, source, create=False) as (from_fd, from_name),
        _parent(root, target, create=True) as (to_fd, to_name),
    ):
        _no_link_at(to_fd, to_name, target)
        os.rename(from_name, to_name, src_dir_fd=from_fd, dst_dir_fd=to_fd)
