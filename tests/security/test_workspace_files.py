"""The worker never follows a link out of a workspace: workspace/files.py, the one module
through which the worker reads and writes in a workspace (tests/security/test_worker_file_io.py
has its callers).

Every test of the module runs twice: through openat2 (where the kernel has it) and
through the component walk that stands in for it elsewhere.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopworks.workspace import beneath, files

pytestmark = pytest.mark.unit

SECRET = "TOP-SECRET-7f3a9c"


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> Iterator[str]:
    beneath.force_fallback(request.param == "walk")
    try:
        yield request.param
    finally:
        beneath.force_fallback(False)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a secret."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(f"{SECRET}\n")
    return out


@pytest.fixture
def ws(tmp_path: Path, resolver: str) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.md").write_text("# guide\n")
    return root


def unchanged(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == f"{SECRET}\n"


def test_the_kernel_path_is_the_one_taken_where_there_is_one(ws: Path, resolver: str) -> None:
    files.read_text(ws, "docs/guide.md", 100)
    if resolver == "openat2" and beneath.uses_openat2() is None:
        pytest.skip("no openat2 on this machine")
    assert beneath.uses_openat2() is (resolver == "openat2")


def test_a_symlink_to_a_file_outside_is_refused(ws: Path, outside: Path) -> None:
    (ws / "artifact.md").symlink_to(outside / "secret.txt")
    with pytest.raises(files.Refused, match=r"artifact\.md"):
        files.read_text(ws, "artifact.md", 1 << 20)
    with pytest.raises(files.Refused):
        files.is_file(ws, "artifact.md")
    with pytest.raises(files.Refused):
        files.sha256(ws, "artifact.md")
    # A relative link that climbs out is the same as an absolute one.
    (ws / "up.md").symlink_to(os.path.relpath(outside / "secret.txt", ws))
    with pytest.raises(files.Refused):
        files.read_bytes(ws, "up.md", 1 << 20)


def test_a_symlink_to_proc_self_environ_is_refused(ws: Path) -> None:
    (ws / "artifact.md").symlink_to("/proc/self/environ")
    with pytest.raises(files.Refused):
        files.read_text(ws, "artifact.md", 1 << 20)
    (ws / "fd").symlink_to("/proc/self/fd")
    with pytest.raises(files.Refused):
        files.read_text(ws, "fd/0", 1 << 20)


def test_a_symlinked_directory_on_the_way_is_refused(ws: Path, outside: Path) -> None:
    (ws / ".loops").symlink_to(outside, target_is_directory=True)
    with pytest.raises(files.Refused):
        files.read_text(ws, ".loops/secret.txt", 1 << 20)
    with pytest.raises(files.Refused):
        files.write_text(ws, ".loops/run.json", "{}")
    with pytest.raises(files.Refused):
        files.mkdir(ws, ".loops/trajectory")
    with pytest.raises(files.Refused):
        files.unlink(ws, ".loops/secret.txt")
    with pytest.raises(files.Refused):
        files.remove(ws, ".loops/secret.txt")
    assert list(files.walk(ws, "")) == [(".loops", True), ("docs/guide.md", False)]
    with pytest.raises(files.Refused):
        list(files.walk(ws, ".loops"))
    unchanged(outside)


@pytest.mark.parametrize("path", ["../outside/secret.txt", "docs/../../outside/secret.txt", ".."])
def test_dot_dot_is_refused(ws: Path, outside: Path, path: str) -> None:
    with pytest.raises(files.Refused, match=r"'\.\.'"):
        files.read_text(ws, path, 1 << 20)
    with pytest.raises(files.Refused, match=r"'\.\.'"):
        files.write_text(ws, path, "x")
    unchanged(outside)


def test_absolute_paths_are_refused(ws: Path, outside: Path) -> None:
    for path in (str(outside / "secret.txt"), str(ws / "docs" / "guide.md"), "~/x"):
        with pytest.raises(files.Refused, match="absolute"):
            files.read_text(ws, path, 1 << 20)
        with pytest.raises(files.Refused, match="absolute"):
            files.write_text(ws, path, "x")
    unchanged(outside)


def test_a_dangling_link_inside_is_nothing_there(ws: Path, outside: Path) -> None:
    (ws / "gone.md").symlink_to("nothing-here.md")
    assert not files.is_file(ws, "gone.md")
    assert files.sha256(ws, "gone.md") is None
    assert files.read_text(ws, "gone.md", 100, missing="") == ""
    with pytest.raises(FileNotFoundError):
        files.read_text(ws, "gone.md", 100)
    # Dangling or not, a link out of the workspace is refused, not "missing".
    (ws / "out.md").symlink_to(outside / "not-yet.txt")
    with pytest.raises(files.Refused):
        files.is_file(ws, "out.md")


def test_a_link_that_stays_inside_is_read(ws: Path) -> None:
    (ws / "artifact.md").symlink_to("docs/guide.md")
    (ws / "docs" / "self.md").symlink_to("../docs/./guide.md")
    (ws / "alias").symlink_to("docs", target_is_directory=True)
    assert files.read_text(ws, "artifact.md", 100) == "# guide\n"
    assert files.read_text(ws, "docs/self.md", 100) == "# guide\n"
    assert files.read_text(ws, "alias/guide.md", 100) == "# guide\n"
    assert files.is_file(ws, "artifact.md")
    # ...unless the caller reads its own records, which hold no link at all.
    with pytest.raises(files.Refused):
        files.read_text(ws, "artifact.md", 100, follow=False)


def test_nothing_is_written_through_a_link(ws: Path, outside: Path) -> None:
    (ws / "run.json").symlink_to(outside / "secret.txt")
    (ws / "inside.md").symlink_to("docs/guide.md")
    for path in ("run.json", "inside.md"):
        with pytest.raises(files.Refused, match="symbolic link"):
            files.write_text(ws, path, "overwritten")
    assert not files.create_text(ws, "run.json", "x")  # a link there is "exists"
    unchanged(outside)
    assert (ws / "docs" / "guide.md").read_text() == "# guide\n"
    # Unlinking removes the link, never its target.
    files.unlink(ws, "run.json")
    assert not (ws / "run.json").is_symlink()
    unchanged(outside)


def test_a_rename_onto_a_link_is_refused(ws: Path, outside: Path) -> None:
    (ws / "target").symlink_to(outside / "secret.txt")
    (ws / "source.md").write_text("mine\n")
    with pytest.raises(files.Refused):
        files.rename(ws, "source.md", "target")
    (ws / "dir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(files.Refused):
        files.rename(ws, "source.md", "dir/moved.md")
    unchanged(outside)
    # A link itself moves as a link, never followed.
    files.rename(ws, "target", "docs/moved-link")
    assert (ws / "docs" / "moved-link").is_symlink()
    unchanged(outside)


def test_reads_are_capped(ws: Path) -> None:
    (ws / "big.md").write_bytes(b"x" * 1000)
    with pytest.raises(files.TooLarge, match="1000 bytes"):
        files.read_bytes(ws, "big.md", 999)
    assert files.read_bytes(ws, "big.md", 10, truncate=True) == b"x" * 10
    assert len(files.read_bytes(ws, "big.md", 1000)) == 1000


def test_a_fifo_is_refused_without_hanging(ws: Path) -> None:
    os.mkfifo(ws / "artifact.md")
    done = threading.Event()

    def read() -> None:
        with pytest.raises(files.Refused, match="not a regular file"):
            files.read_text(ws, "artifact.md", 100)
        done.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert done.is_set(), "reading a FIFO hung the worker"


def test_a_write_keeps_the_files_mode_and_leaves_no_temporary(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert files.write_text(ws, "run.sh", "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert not files.write_text(ws, "new/dir/file.txt", "x")
    assert sorted(p.name for p in ws.iterdir()) == ["docs", "new", "run.sh"]
