"""Regular expressions from outside the worker, on a linear-time engine.

A pattern check's pattern comes from a client's rules or a model's answer, the search
tool's from a model. Python's `re` backtracks: `^(a+)+$` over 26 characters holds the
GIL for seconds, each further character doubles it, and a worker that holds the GIL
stops heartbeating. RE2 (Google's, through its `google-re2` binding) matches in time
linear in the text, whatever the pattern, and releases the GIL while it matches.

RE2 is not Python's syntax in full: no backreferences (`\\1`, `(?P=name)`), no lookaround
(`(?=...)`, `(?<!...)`), no possessive or atomic groups, no `(?x)`; `\\w`, `\\d`, `\\s` and
`\\b` are ASCII only. A pattern it cannot run is an `UnsupportedPattern` saying why, never
a fallback to `re`. Python's `\\Z` (end of text) is taken as RE2's `\\z`.

Linear is not free: for a pattern whose automaton outgrows RE2's memory budget, the cost
is the text's length times the size of the compiled program (about 6 ns for each
instruction and byte: a few seconds a MiB for a program of a few hundred instructions).
`match_cost` is that product, and a search whose cost is over `MATCH_COST_MAX` is refused
before it starts, so no one search runs longer than a few seconds; callers run it off the
event loop, and RE2 releases the GIL, so heartbeats go on meanwhile. What bounds many
searches together is their caller's deadline (docs/loop.md#bounded-checks).
"""

from __future__ import annotations

import functools
from typing import TypeAlias

import re2

# What `compile_pattern` gives: `search(text)` is all its callers use.
CompiledPattern: TypeAlias = "re2._Regexp[str]"
# The longest pattern accepted: a real check or search is a line, not a page.
PATTERN_MAX_CHARS = 1000
# The largest compiled program accepted (RE2's `programsize`, about one instruction per
# literal character or class): `^## Summary` is 15, `[^a]{1000}` is over 8000.
PROGRAM_MAX_SIZE = 2000
# Memory RE2 may use for one pattern (program and automaton cache); it falls back to its
# slower, still linear, matcher beyond it.
MEMORY_MAX_BYTES = 8 << 20
# The most text one pattern check searches; a larger file fails the check saying so.
TEXT_MAX_BYTES = 1 << 20
# The costliest one search may be (`match_cost`: compiled program size x text bytes), at
# most about 7 s on RE2's slow path: a line-length check such as `.{121,}` (973
# instructions) over a whole 1 MiB file fits; the 2000-instruction cap fits 512 KiB.
MATCH_COST_MAX = 1 << 30

SYNTAX = "RE2 syntax: no backreferences or lookaround"


class UnsupportedPattern(ValueError):
    """A pattern RE2 will not run, and why."""


def compile_pattern(pattern: str, *, multiline: bool = False) -> CompiledPattern:
    """`pattern` compiled by RE2; with `multiline`, `^` and `$` match at every line, as
    Python's `re.MULTILINE` has them. Only a match's span is kept (groups would cost a
    slower matcher and nothing here reads them).

    Raises UnsupportedPattern when the pattern is too long, RE2 cannot parse it, or its
    program is too large.
    """
    if len(pattern) > PATTERN_MAX_CHARS:
        raise UnsupportedPattern(
            f"the pattern is {len(pattern)} characters long; at most {PATTERN_MAX_CHARS} are "
            "accepted"
        )
    source = ("(?m)" if multiline else "") + _python_end_anchor(pattern)
    try:
        regex = re2.compile(source, _options())
    except re2.error as exc:
        raise UnsupportedPattern(f"{_message(exc)} ({SYNTAX})") from exc
    if regex.programsize > PROGRAM_MAX_SIZE:
        raise UnsupportedPattern(
            f"the pattern compiles to {regex.programsize} instructions; at most "
            f"{PROGRAM_MAX_SIZE} are accepted (use fewer or smaller repetitions)"
        )
    return regex


def match_cost(regex: CompiledPattern, text_bytes: int) -> int:
    """The most one search of `regex` over `text_bytes` bytes of text can cost, in RE2's
    units of work: the compiled program's size times the text's. A search that fits RE2's
    fast matcher costs far less; this is the bound when it does not."""
    return regex.programsize * text_bytes


def check_pattern(pattern: str, *, multiline: bool = False) -> str:
    """`pattern` unchanged when `compile_pattern` accepts it (a validator's shape)."""
    refusal = _refusal(pattern, multiline)
    if refusal is not None:
        raise UnsupportedPattern(refusal)
    return pattern


# A rule's pattern is validated again each time a payload carrying it is decoded (every
# step's input holds the run's rules), and compiling is most of a rule's validation: the
# verdict is remembered, not the compiled program, whose automaton may grow to
# MEMORY_MAX_BYTES once searched. Bounded, as patterns come from clients and models.
@functools.lru_cache(maxsize=1024)
def _refusal(pattern: str, multiline: bool) -> str | None:
    """Why `compile_pattern` refuses `pattern`; None when it accepts it."""
    try:
        compile_pattern(pattern, multiline=multiline)
    except UnsupportedPattern as exc:
        return str(exc)
    return None


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MEMORY_MAX_BYTES
    options.never_capture = True
    # RE2 logs every pattern it rejects to stderr; the caller reports it instead.
    options.log_errors = False
    return options


def _python_end_anchor(pattern: str) -> str:
    """Python's `\\Z` (end of text, its spelling of `\\z`) as RE2's `\\z`; an escaped
    backslash before a `Z` is left alone."""
    if "\\Z" not in pattern:
        return pattern
    out: list[str] = []
    i = 0
    while i < len(pattern):
        pair = pattern[i : i + 2]
        if pair.startswith("\\") and len(pair) == 2:
            out.append("\\z" if pair == "\\Z" else pair)
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def _message(exc: re2.error) -> str:
    detail = exc.args[0] if exc.args else "invalid pattern"
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
