"""A bash command line split into the simple commands bash would run, for the policy to judge.

Hand-written because no library splits bash the way bash runs it: `shlex` knows quotes but not
`;`, `|`, `$(...)`, redirections or heredocs, and each of those can hide a command. `parse`
returns every simple command (its text with redirections taken out, the files it writes, what
it reads on stdin) and the text of every substitution, which the policy checks as commands of
their own. Pure functions of the text: nothing here decides what is allowed.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

# Stands in for a command substitution in the text of the command around it.
_SUBST = "$(...)"
_WORD_END = frozenset(" \t\n;&|()<>")


class ShellSyntaxError(Exception):
    """Text the tokenizer cannot split (an unterminated quote, an unbalanced bracket, ...)."""


@dataclass
class Segment:
    """One simple command of a bash command line."""

    text: str  # substitutions replaced by _SUBST, redirections removed
    piped: bool  # its stdin is the previous command's stdout
    writes: list[str] = field(default_factory=list)  # output redirection targets, as written
    stdin: list[str] = field(default_factory=list)  # heredoc bodies and here-strings fed to it


def unquote(word: str) -> str:
    """The word with its quotes removed, or as it is when it is not exactly one word."""
    try:
        parts = shlex.split(word)
    except ValueError:
        return word
    return parts[0] if len(parts) == 1 else word


def brace_alternatives(word: str, limit: int = 64) -> list[str]:
    """The words a brace expansion like {/,x} or pre{a,b}post stands for (one word otherwise)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not match or limit <= 0:
        return [word]
    out: list[str] = []
    for alt in match.group(1).split(","):
        out.extend(
            brace_alternatives(word[: match.start()] + alt + word[match.end() :], limit // 2)
        )
    return out


# -- quotes and expansions ------------------------------------------------------------------------


def _skip_single(cmd: str, i: int) -> int:
    """Index after the single-quoted string starting at cmd[i] == "'"."""
    j = cmd.find("'", i + 1)
    if j < 0:
        raise ShellSyntaxError("unterminated single quote")
    return j + 1


def _skip_ansi_c(cmd: str, i: int) -> int:
    """Index after the $'...' string starting at cmd[i] == '$'."""
    j = i + 2
    while j < len(cmd):
        if cmd[j] == "\\":
            j += 2
        elif cmd[j] == "'":
            return j + 1
        else:
            j += 1
    raise ShellSyntaxError("unterminated $'...' quote")


def _backtick(cmd: str, i: int) -> tuple[str, int]:
    """(inner text, index after) of the backtick substitution starting at cmd[i] == '`'."""
    j = i + 1
    while j < len(cmd):
        if cmd[j] == "\\":
            j += 2
        elif cmd[j] == "`":
            return cmd[i + 1 : j], j + 1
        else:
            j += 1
    raise ShellSyntaxError("unterminated backtick")


def _matching(cmd: str, i: int, opening: str, closing: str) -> tuple[str, int]:
    """(inner text, index after) of the bracketed group whose opening bracket is cmd[i]."""
    depth = 0
    j = i
    while j < len(cmd):
        c = cmd[j]
        if c == "\\":
            j += 2
            continue
        if c == "'":
            j = _skip_single(cmd, j)
            continue
        if c == '"':
            j = _skip_double(cmd, j)
            continue
        if c == "`":
            j = _backtick(cmd, j)[1]
            continue
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return cmd[i + 1 : j], j + 1
        j += 1
    raise ShellSyntaxError(f"unbalanced {opening}{closing}")


def _skip_double(cmd: str, i: int) -> int:
    """Index after the double-quoted string starting at cmd[i] == '"'.

    Unlike `_double_quoted`, collects nothing: it only finds the end of a bracketed group, whose
    text is scanned again afterwards (as a command of its own, or for substitutions).
    """
    j = i + 1
    while j < len(cmd):
        c = cmd[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif cmd.startswith("$(", j):
            j = _matching(cmd, j + 1, "(", ")")[1]
        elif cmd.startswith("${", j):
            j = _matching(cmd, j + 1, "{", "}")[1]
        elif c == "`":
            j = _backtick(cmd, j)[1]
        else:
            j += 1
    raise ShellSyntaxError("unterminated double quote")


def _expansions(cmd: str, i: int, nested: list[str]) -> tuple[str, int] | None:
    """A $(...), ${...}, `...` at cmd[i]: (text to keep, index after), the inner text in nested."""
    if cmd.startswith("$(", i):
        inner, end = _matching(cmd, i + 1, "(", ")")
        nested.append(inner)
        return _SUBST, end
    if cmd.startswith("${", i):
        inner, end = _matching(cmd, i + 1, "{", "}")
        # ${x:-$(cmd)} runs cmd: collect the substitutions inside.
        _substitutions_in(inner, nested)
        return cmd[i:end], end
    if cmd[i] == "`":
        inner, end = _backtick(cmd, i)
        nested.append(inner)
        return _SUBST, end
    return None


def _double_quoted(cmd: str, i: int, nested: list[str]) -> tuple[str, int]:
    """The double-quoted string at cmd[i] with its substitutions replaced, and the index after."""
    out = ['"']
    j = i + 1
    while j < len(cmd):
        c = cmd[j]
        if c == "\\":
            out.append(cmd[j : j + 2])
            j += 2
            continue
        if c == '"':
            out.append('"')
            return "".join(out), j + 1
        expansion = _expansions(cmd, j, nested)
        if expansion is not None:
            out.append(expansion[0])
            j = expansion[1]
            continue
        out.append(c)
        j += 1
    raise ShellSyntaxError("unterminated double quote")


def _quoted(cmd: str, i: int, nested: list[str]) -> tuple[str, int] | None:
    """An escape, quoted string or expansion at cmd[i]: (text to keep, index after); else None.

    The part of a word that bash reads as one piece whatever characters it holds, so a `;` or
    `>` inside it neither ends the command nor redirects.
    """
    c = cmd[i]
    if c == "\\":
        return cmd[i : i + 2], i + 2
    if c == "'":
        end = _skip_single(cmd, i)
        return cmd[i:end], end
    if c == '"':
        return _double_quoted(cmd, i, nested)
    if cmd.startswith("$'", i):
        end = _skip_ansi_c(cmd, i)
        return cmd[i:end], end
    return _expansions(cmd, i, nested)


def _word(cmd: str, i: int, nested: list[str]) -> tuple[str, int]:
    """The shell word starting at or after cmd[i] (leading blanks skipped), quotes kept."""
    while i < len(cmd) and cmd[i] in " \t":
        i += 1
    out: list[str] = []
    while i < len(cmd) and cmd[i] not in _WORD_END:
        piece = _quoted(cmd, i, nested) or (cmd[i], i + 1)
        out.append(piece[0])
        i = piece[1]
    if not out:
        raise ShellSyntaxError("a redirection without a target")
    return "".join(out), i


def _substitutions_in(text: str, nested: list[str]) -> None:
    """Collect the $(...), ${...} and `...` of text where bash expands them (heredoc bodies)."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        try:
            expansion = _expansions(text, i, nested)
        except ShellSyntaxError:
            expansion = None
        i = expansion[1] if expansion is not None else i + 1


# -- simple commands ------------------------------------------------------------------------------


@dataclass
class _Heredoc:
    delimiter: str
    strip_tabs: bool
    expands: bool
    into: list[str]  # the stdin list of the segment it feeds


def parse(cmd: str) -> tuple[list[Segment], list[str]]:
    """Split bash text into simple commands; also return the text of every substitution in it.

    Control operators (; & && || | |& newline), subshell and group brackets end a command;
    redirections are taken out of the command's text and their targets kept; heredoc bodies and
    here-strings are kept as the stdin of the command they feed; comments are dropped.
    Raises `ShellSyntaxError` on text bash would not run either.
    """
    segments: list[Segment] = []
    nested: list[str] = []
    buf: list[str] = []
    current = Segment(text="", piped=False)
    heredocs: list[_Heredoc] = []

    def flush(next_piped: bool) -> None:
        nonlocal buf, current
        current.text = "".join(buf)
        if current.text.strip() or current.writes or current.stdin or heredocs:
            segments.append(current)
        buf = []
        current = Segment(text="", piped=next_piped)

    def strip_fd_number() -> None:
        # "2>file": the 2 belongs to the redirection, not to the command's words.
        text = "".join(buf)
        match = re.search(r"(?:^|[ \t])(\d+)$", text)
        if match:
            buf[:] = [text[: match.start(1)]]

    i, n = 0, len(cmd)
    while i < n:
        c = cmd[i]
        nxt = cmd[i + 1 : i + 2]
        if c == "\\" and nxt == "\n":  # line continuation
            i += 2
        elif (piece := _quoted(cmd, i, nested)) is not None:
            buf.append(piece[0])
            i = piece[1]
        elif c in "<>" and nxt == "(":  # process substitution
            inner, i = _matching(cmd, i + 1, "(", ")")
            nested.append(inner)
            buf.append(_SUBST)
        elif c == "#" and (i == 0 or cmd[i - 1] in " \t\n;&|()"):
            while i < n and cmd[i] != "\n":
                i += 1
        elif c == "\n":
            flush(False)
            i += 1
            if heredocs:
                i = _read_heredocs(cmd, i, heredocs, nested)
                heredocs.clear()
        elif c == ";":
            flush(False)
            i += 1
        elif c == "|":
            if nxt == "|":
                flush(False)
                i += 2
            else:
                flush(True)
                i += 2 if nxt == "&" else 1
        elif c == "&":
            if nxt == "&":
                flush(False)
                i += 2
            elif nxt == ">":  # &> and &>> redirect stdout and stderr
                i += 3 if cmd[i + 2 : i + 3] == ">" else 2
                target, i = _word(cmd, i, nested)
                current.writes.append(target)
            else:
                flush(False)
                i += 1
        elif c in "()":
            flush(False)
            i += 1
        elif c in "<>":
            strip_fd_number()
            if cmd.startswith("<<<", i):
                word, i = _word(cmd, i + 3, nested)
                current.stdin.append(unquote(word))
            elif cmd.startswith("<<", i):
                i += 2
                strip_tabs = cmd[i : i + 1] == "-"
                word, i = _word(cmd, i + 1 if strip_tabs else i, nested)
                quoted = any(q in word for q in "'\"\\")
                heredocs.append(_Heredoc(unquote(word), strip_tabs, not quoted, current.stdin))
            elif c == "<" and nxt != ">":  # input: reading is not refused here
                i = _word(cmd, i + 2 if nxt == "&" else i + 1, nested)[1]
            else:  # > >> >| >& <>
                i += 1
                if cmd[i : i + 1] in (">", "|"):
                    i += 1
                duplicate = cmd[i : i + 1] == "&"
                if duplicate:
                    i += 1
                target, i = _word(cmd, i, nested)
                if not (duplicate and re.fullmatch(r"\d*-?", target)):
                    current.writes.append(target)
        else:
            buf.append(c)
            i += 1
    flush(False)
    return segments, nested


def _read_heredocs(cmd: str, i: int, heredocs: list[_Heredoc], nested: list[str]) -> int:
    """Consume the bodies of the pending heredocs from cmd[i:]; return the index after them."""
    for doc in heredocs:
        lines: list[str] = []
        while i < len(cmd):
            end = cmd.find("\n", i)
            end = len(cmd) if end < 0 else end
            line = cmd[i:end]
            i = end + 1
            if (line.lstrip("\t") if doc.strip_tabs else line) == doc.delimiter:
                break
            lines.append(line)
        body = "\n".join(lines)
        if doc.expands:
            _substitutions_in(body, nested)
        doc.into.append(body)
    return i
