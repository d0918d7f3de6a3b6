"""A repository on disk that names programs everywhere git would run one: hooks, config,
attributes, alternates. Each program, when run, appends a line to a file of its own name in
`markers`: a test asserts that directory stays empty.

The programs also do their job harmlessly (a filter passes content through, a hook exits 0),
so git's work goes on as it would and a run on the origin still completes: a marker is the
only sign one ran.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.integration.stack import git

# Every hook git knows; each one in the origin's hooks/ and in its core.hooksPath.
HOOKS = (
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
)
# What each named program prints, so git's work goes on: a filter or textconv passes its
# input through, everything else prints nothing and succeeds.
_PASS_THROUGH = {"filter-clean": "cat", "filter-smudge": "cat", "textconv": 'cat "$1"'}
# A signature that makes `log --show-signature` (log.showSignature) ask gpg.program.
_SIGNATURE = (
    "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n"
)


@dataclass(frozen=True)
class HostileOrigin:
    path: Path  # the bare repository
    markers: Path  # where a program that ran left its name

    def forget(self) -> None:
        """Forget what ran so far (what a test's own setup made the origin run)."""
        for marker in self.markers.iterdir():
            marker.unlink()

    def ran(self) -> list[str]:
        """The programs that ran, each with the arguments of its first run."""
        return sorted(
            f"{f.name}: {f.read_text().splitlines()[0] if f.read_text() else ''}"
            for f in self.markers.iterdir()
        )


def program(markers: Path, name: str) -> str:
    """An executable that records that it ran (as `name`), then does its harmless job."""
    bin_dir = markers.parent / "programs"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    action = _PASS_THROUGH.get(name, "exit 0")
    script.write_text(f'#!/bin/sh\necho "ran $*" >> "{markers / name}"\n{action}\n')
    script.chmod(0o755)
    return str(script)


def _hooks(directory: Path, markers: Path, prefix: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for hook in HOOKS:
        target = directory / hook
        target.write_text(f'#!/bin/sh\necho "ran $*" >> "{markers / (prefix + hook)}"\nexit 0\n')
        target.chmod(0o755)


def signed_commit(git_dir: Path, tree: str, parents: list[str], message: str) -> str:
    """A commit carrying a (bogus) PGP signature, written into `git_dir`; its sha."""
    lines = [f"tree {tree}", *(f"parent {parent}" for parent in parents)]
    who = "t <t@example.com> 1714564800 +0000"
    raw = "\n".join([*lines, f"author {who}", f"committer {who}"]) + "\n"
    signed = f"{raw}{_SIGNATURE}\n{message}\n"
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", "hash-object", "-t", "commit", "-w", "--stdin"],
        input=signed,
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def _signed_head(bare: Path) -> None:
    """Replace main's head commit by the same commit carrying a signature."""
    tree = git("rev-parse", "main^{tree}", cwd=bare)
    git("update-ref", "refs/heads/main", signed_commit(bare, tree, [], "Initial commit"), cwd=bare)


def hostile_origin(root: Path, files: dict[str, str] | None = None) -> HostileOrigin:
    """A bare origin under `root` with a signed commit on `main` holding `files` (a README
    by default) and a .gitattributes that puts every path through the `evil` drivers; its
    hooks, config and alternates name programs that leave a marker when run."""
    markers = root / "markers"
    markers.mkdir(parents=True)
    bare, scratch = root / "hostile.git", root / "hostile-scratch"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    git("init", "--quiet", "--initial-branch=main", str(scratch))
    for relpath, text in {"README.md": "# a project\n", **(files or {})}.items():
        (scratch / relpath).parent.mkdir(parents=True, exist_ok=True)
        (scratch / relpath).write_text(text)
    (scratch / ".gitattributes").write_text("* filter=evil diff=evil merge=evil\n")
    git("add", "-A", cwd=scratch)
    git("-c", "commit.gpgsign=false", "commit", "--quiet", "-m", "Initial commit", cwd=scratch)
    git("push", "--quiet", str(bare), "HEAD:refs/heads/main", cwd=scratch)
    _signed_head(bare)

    _hooks(bare / "hooks", markers, "hook-")
    _hooks(bare / "own-hooks", markers, "hookspath-")
    # An object store it borrows: what receive-pack advertises through alternateRefsCommand.
    borrowed = root / "borrowed.git"
    git("init", "--quiet", "--bare", str(borrowed))
    (bare / "objects" / "info" / "alternates").write_text(f"{borrowed / 'objects'}\n")
    (bare / "info").mkdir(exist_ok=True)
    (bare / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n")
    config = {
        "core.hooksPath": str(bare / "own-hooks"),
        "core.fsmonitor": program(markers, "fsmonitor"),
        "core.alternateRefsCommand": program(markers, "alternate-refs"),
        "core.sshCommand": program(markers, "ssh"),
        "core.askPass": program(markers, "askpass"),
        "core.pager": program(markers, "pager"),
        "core.editor": program(markers, "editor"),
        "credential.helper": program(markers, "credential-helper"),
        "log.showSignature": "true",
        "gpg.program": program(markers, "gpg"),
        "gpg.openpgp.program": program(markers, "gpg-openpgp"),
        "gpg.x509.program": program(markers, "gpg-x509"),
        "gpg.ssh.program": program(markers, "gpg-ssh"),
        "diff.external": program(markers, "diff-external"),
        "diff.evil.command": program(markers, "diff-command"),
        "diff.evil.textconv": program(markers, "textconv"),
        "filter.evil.clean": program(markers, "filter-clean"),
        "filter.evil.smudge": program(markers, "filter-smudge"),
        "merge.evil.driver": program(markers, "merge-driver"),
        "uploadpack.packObjectsHook": program(markers, "pack-objects-hook"),
        "gc.auto": "1",
        "gc.autoDetach": "false",
        "receive.autogc": "true",
    }
    for key, value in config.items():
        git("config", key, value, cwd=bare)
    return HostileOrigin(path=bare, markers=markers)
