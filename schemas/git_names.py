"""Git's rules for names, checked without starting git: a ref name (requests name a base
branch, checked as they arrive; workers name the refs they ask for, workspace/runner.py),
and whether an origin is a URL or a local path (the CLI, the API and workers tell them
apart alike)."""

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


def is_url(origin: str) -> bool:
    """True for `scheme://…` and scp-like `host:path` origins, False for local paths."""
    if "://" in origin:
        return True
    head = origin.split("/", 1)[0]
    return ":" in head and not re.match(r"^[A-Za-z]:$", head)
