"""valid_ref_name says what `git check-ref-format` says, without starting git."""

from __future__ import annotations

import random
import subprocess

import pytest

from loopworks.schemas.git_names import valid_ref_name

pytestmark = pytest.mark.unit

NAMES = [
    "refs/heads/main",
    "refs/heads/loops/run-1",
    "refs/loopworks/graph-1/T-001/1",
    "refs/heads/日本語",
    "main",
    "@",
    "refs/heads/@",
    "refs/heads/a@b",
    "refs/heads/a@{1}",
    "refs/heads/.hidden",
    "refs/heads/a/.b",
    "refs/heads/a.lock",
    "refs/heads/a.lock/b",
    "refs/heads/a.locked",
    "refs/heads/a..b",
    "refs/heads/a.",
    "refs/heads/a/",
    "/refs/heads/a",
    "refs//heads/a",
    "refs/heads/a b",
    "refs/heads/a\tb",
    "refs/heads/a\x7fb",
    "refs/heads/a~1",
    "refs/heads/a^",
    "refs/heads/a:b",
    "refs/heads/a?",
    "refs/heads/a*",
    "refs/heads/a[b",
    "refs/heads/a]b",
    "refs/heads/a\\b",
    "refs/heads/-a",
    "refs/heads/a-",
    "refs/heads/a.b.c",
    "refs/heads/..",
    "refs/heads/.",
    "refs/./heads",
]


def _git_accepts(ref: str) -> bool:
    return subprocess.run(["git", "check-ref-format", ref], capture_output=True).returncode == 0


@pytest.mark.parametrize("ref", NAMES)
def test_as_git_says(ref: str) -> None:
    assert valid_ref_name(ref) == _git_accepts(ref)


def test_as_git_says_of_random_names() -> None:
    alphabet = "ab./.@{}~^:?*[\\ -_lock\x01é"
    rng = random.Random(14)
    names = [
        "refs/" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        for _ in range(300)
    ]
    differ = [ref for ref in names if valid_ref_name(ref) != _git_accepts(ref)]
    assert not differ
