"""What a path, as a model writes it, says about the workspace: outside it, into .git, computed.

Text-only judgements shared by the file tools' `ToolGuard.path` and the command rules; resolving
symlinks against the workspace on disk is left to those callers, which know its root.
"""

from __future__ import annotations

import re

# Output targets that are not files of anybody's.
_HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


def has_git_component(parts: tuple[str, ...] | list[str]) -> bool:
    """Whether any component is `.git` (in any case: case-insensitive filesystems exist)."""
    return any(part.lower() == ".git" for part in parts)


def into_git(word: str) -> bool:
    return has_git_component(word.split("/"))


def outside(word: str) -> bool:
    """Whether a path operand names something outside the workspace (absolute, ~, or ..)."""
    if word in _HARMLESS_DEVICES or re.fullmatch(r"/dev/fd/\d+", word):
        return False
    return word.startswith(("/", "~")) or ".." in word.split("/")


def computed(word: str) -> bool:
    """Whether the word holds an expansion or substitution, so only bash knows what it names."""
    return "$" in word or "`" in word
