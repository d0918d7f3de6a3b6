"""Git's rules for a ref name, checked without starting git: requests name a base branch
(checked as they arrive), and workers name the refs they ask for (workspace/runner.py)."""

from __future__ import annotations

import re

# What git-check-ref-format(1) refuses anywhere in a name: control characters and space,
# ~ ^ : ? * [ \, "..", "@{", and empty components.
_REF_REFUSED = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


def valid_ref_name(ref: str) -> bool:
    """Whether `git check-ref-format <ref>` accepts `ref` (at least two components), by
    its rules, so naming a branch starts no process."""
    if ref == "@" or "/" not in ref or ref.startswith("/") or ref.endswith(("/", ".")):
        return False
    if _REF_REFUSED.search(ref):
        return False
    return all(not part.startswith(".") and not part.endswith(".lock") for part in ref.split("/"))
