"""The PreToolUse policy every workspace tool call passes (seed 003's `permissionDecision: deny`).

`ToolGuard.path` keeps file tools inside the run's workspace; `ToolGuard.command` refuses
destructive, escaping and secret-reading shell commands; `tool_env` is the only environment a
command ever sees. A refusal raises `ToolDenied`, whose message is shown to the model.

This is a policy filter, not a sandbox: an allowed interpreter (`python3 -c ...`) can still do
anything the worker's user can. It stops the obvious and the accidental; the scrubbed
environment is what keeps secrets out of reach of everything a command starts.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

logger = logging.getLogger(__name__)

MAX_COMMAND_CHARS = 64 * 1024
# bash -c "...", eval, $(...) inside $(...): deeper than this is refused rather than analysed.
_MAX_DEPTH = 8
# Stands in for a command substitution in the text of the command around it.
_SUBST = "$(...)"

_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_SECRET_PREFIXES = ("ANTHROPIC_", "AWS_", "GITHUB_")
# Output targets that are not files of anybody's.
_HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


class ToolDenied(Exception):
    """A tool call refused by the policy; the message says why and is shown to the model."""


def tool_env(workspace: Path) -> dict[str, str]:
    """The whole environment of a tool command: PATH, HOME (the workspace) and LANG, nothing else.

    Defense in depth: even a command the guard lets through (or a trick it misses) finds no API
    key, token or credential in its own environment.
    """
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(workspace),
        "LANG": "C.UTF-8",
    }


def secret_name(name: str) -> bool:
    """Whether an environment variable's name looks like it holds a secret (case-insensitive)."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS) or upper.startswith(_SECRET_PREFIXES)


# -- paths ---------------------------------------------------------------------------------------


class ToolGuard:
    """The policy for one workspace: `path()` for file tools, `command()` for shell commands."""

    def __init__(self, workspace: Path) -> None:
        self.root = Path(workspace).resolve()

    def path(self, p: str) -> Path:
        """Resolve a model-supplied relative path to an absolute path inside the workspace.

        Refuses empty paths, NUL bytes, absolute and home-relative paths (even ones that point
        inside), any `..` component, anything whose resolution (following every symlink, the
        last component's and its parents') leaves the workspace, and anything in `.git`.
        """
        if not isinstance(p, str) or not p.strip():
            raise ToolDenied("refusing: empty path; give a path relative to the workspace")
        if "\x00" in p:
            raise ToolDenied("refusing: path contains a NUL byte")
        if p.startswith("/") or os.path.isabs(p):
            raise ToolDenied(
                f"refusing: absolute path {p!r}; give a path relative to the workspace root"
            )
        if p.startswith("~"):
            raise ToolDenied(
                f"refusing: home-relative path {p!r}; give a path relative to the workspace root"
            )
        parts = PurePosixPath(p).parts
        if ".." in parts:
            raise ToolDenied(f"refusing: path {p!r} contains '..'; paths stay inside the workspace")
        if _has_git_component(parts):
            raise ToolDenied(
                f"refusing: {p!r} is inside .git; the run's history is not yours to edit"
            )
        try:
            target = (self.root / p).resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops, names too long
            raise ToolDenied(f"refusing: cannot resolve {p!r}: {exc}") from exc
        if target != self.root and self.root not in target.parents:
            raise ToolDenied(f"refusing: {p!r} resolves outside the workspace (through a symlink)")
        if _has_git_component(target.relative_to(self.root).parts):
            raise ToolDenied(
                f"refusing: {p!r} leads into .git; the run's history is not yours to edit"
            )
        return target

    def relative(self, target: Path) -> str:
        """`target` (inside the workspace) as the relative path the model should use."""
        rel = target.relative_to(self.root).as_posix()
        return rel if rel else "."

    # -- commands --------------------------------------------------------------------------------

    def command(self, cmd: str) -> str:
        """Return `cmd` unchanged when the policy allows running it with bash; else ToolDenied."""
        if not isinstance(cmd, str) or not cmd.strip():
            raise ToolDenied("refusing: empty command")
        if "\x00" in cmd:
            raise ToolDenied("refusing: command contains a NUL byte")
        if len(cmd) > MAX_COMMAND_CHARS:
            raise ToolDenied(
                f"refusing: command is {len(cmd)} characters (at most {MAX_COMMAND_CHARS}); "
                "write long scripts to a file with write_file and run the file"
            )
        try:
            _CommandPolicy(self.root).check(cmd, 0)
        except ToolDenied as exc:
            logger.info("tool command denied: %s", exc)
            raise
        return cmd


def _has_git_component(parts: tuple[str, ...] | list[str]) -> bool:
    return any(part.lower() == ".git" for part in parts)


# -- lexing: bash text into simple commands -------------------------------------------------------


@dataclass
class _Segment:
    """One simple command of a bash command line."""

    text: str  # substitutions replaced by _SUBST, redirections removed
    piped: bool  # its stdin is the previous command's stdout
    writes: list[str] = field(default_factory=list)  # output redirection targets, as written
    stdin: list[str] = field(default_factory=list)  # heredoc bodies and here-strings fed to it


def _unbalanced(what: str) -> ToolDenied:
    return ToolDenied(f"refusing: could not parse the command ({what})")


def _skip_single(cmd: str, i: int) -> int:
    """Index after the single-quoted string starting at cmd[i] == "'"."""
    j = cmd.find("'", i + 1)
    if j < 0:
        raise _unbalanced("unterminated single quote")
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
    raise _unbalanced("unterminated $'...' quote")


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
    raise _unbalanced("unterminated backtick")


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
    raise _unbalanced(f"unbalanced {opening}{closing}")


def _skip_double(cmd: str, i: int) -> int:
    """Index after the double-quoted string starting at cmd[i] == '"'."""
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
    raise _unbalanced("unterminated double quote")


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
    raise _unbalanced("unterminated double quote")


_WORD_END = frozenset(" \t\n;&|()<>")


def _word(cmd: str, i: int, nested: list[str]) -> tuple[str, int]:
    """The shell word starting at or after cmd[i] (leading blanks skipped), quotes kept."""
    while i < len(cmd) and cmd[i] in " \t":
        i += 1
    out: list[str] = []
    while i < len(cmd) and cmd[i] not in _WORD_END:
        c = cmd[i]
        if c == "\\":
            out.append(cmd[i : i + 2])
            i += 2
        elif c == "'":
            end = _skip_single(cmd, i)
            out.append(cmd[i:end])
            i = end
        elif c == '"':
            text, i = _double_quoted(cmd, i, nested)
            out.append(text)
        elif cmd.startswith("$'", i):
            end = _skip_ansi_c(cmd, i)
            out.append(cmd[i:end])
            i = end
        elif (expansion := _expansions(cmd, i, nested)) is not None:
            out.append(expansion[0])
            i = expansion[1]
        else:
            out.append(c)
            i += 1
    if not out:
        raise _unbalanced("a redirection without a target")
    return "".join(out), i


def _unquote(word: str) -> str:
    try:
        parts = shlex.split(word)
    except ValueError:
        return word
    return parts[0] if len(parts) == 1 else word


def _substitutions_in(text: str, nested: list[str]) -> None:
    """Collect the $(...), ${...} and `...` of text where bash expands them (heredoc bodies)."""
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        try:
            expansion = _expansions(text, i, nested)
        except ToolDenied:
            expansion = None
        i = expansion[1] if expansion is not None else i + 1


@dataclass
class _Heredoc:
    delimiter: str
    strip_tabs: bool
    expands: bool
    into: list[str]  # the stdin list of the segment it feeds


def _parse(cmd: str) -> tuple[list[_Segment], list[str]]:
    """Split bash text into simple commands; also return the text of every substitution in it.

    Control operators (; & && || | |& newline), subshell and group brackets end a command;
    redirections are taken out of the command's text and their targets kept; heredoc bodies and
    here-strings are kept as the stdin of the command they feed; comments are dropped.
    """
    segments: list[_Segment] = []
    nested: list[str] = []
    buf: list[str] = []
    current = _Segment(text="", piped=False)
    heredocs: list[_Heredoc] = []

    def flush(next_piped: bool) -> None:
        nonlocal buf, current
        current.text = "".join(buf)
        if current.text.strip() or current.writes or current.stdin or heredocs:
            segments.append(current)
        buf = []
        current = _Segment(text="", piped=next_piped)

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
        if c == "\\":
            if nxt == "\n":  # line continuation
                i += 2
                continue
            buf.append(cmd[i : i + 2])
            i += 2
        elif c == "'":
            end = _skip_single(cmd, i)
            buf.append(cmd[i:end])
            i = end
        elif c == '"':
            text, i = _double_quoted(cmd, i, nested)
            buf.append(text)
        elif cmd.startswith("$'", i):
            end = _skip_ansi_c(cmd, i)
            buf.append(cmd[i:end])
            i = end
        elif (expansion := _expansions(cmd, i, nested)) is not None:
            buf.append(expansion[0])
            i = expansion[1]
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
                current.stdin.append(_unquote(word))
            elif cmd.startswith("<<", i):
                i += 2
                strip_tabs = cmd[i : i + 1] == "-"
                word, i = _word(cmd, i + 1 if strip_tabs else i, nested)
                quoted = any(q in word for q in "'\"\\")
                heredocs.append(_Heredoc(_unquote(word), strip_tabs, not quoted, current.stdin))
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


# -- the policy ----------------------------------------------------------------------------------

_RESERVED = frozenset(
    {"{", "}", "!", "then", "do", "else", "elif", "if", "while", "until", "fi", "done", "esac"}
)
_NOT_A_COMMAND = frozenset({"for", "case", "select", "function", "in", "[[", "]]"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Programs refused whatever their arguments, with the reason the model is given.
_REFUSED_PROGRAMS: dict[str, str] = {
    name: why
    for names, why in (
        (
            "sudo su doas pkexec runuser chroot nsenter unshare",
            "privilege escalation or leaving the workspace's context",
        ),
        (
            "mkfs mke2fs mkswap fdisk sfdisk parted wipefs mount umount swapon swapoff losetup",
            "disk and filesystem administration",
        ),
        (
            "shutdown reboot halt poweroff init telinit systemctl service",
            "stopping or managing the machine's services",
        ),
        ("pkill killall killall5", "killing processes by name (it could hit the worker)"),
        ("ssh scp sftp nc ncat netcat socat telnet ftp", "network access from tools"),
        ("crontab at batch", "scheduling commands to run later"),
        (
            "insmod rmmod modprobe iptables nft useradd userdel usermod passwd chpasswd visudo",
            "system administration",
        ),
        ("printenv", "reading the environment (tools run without secrets)"),
    )
    for name in names.split()
}

_PLAIN_WRAPPERS = _words("command builtin exec nohup setsid unbuffer busybox coproc")
_SHELLS = _words("sh bash zsh dash ksh ash mksh fish tcsh csh")
_INTERPRETER = re.compile(r"^(?:python[0-9.]*|perl[0-9.]*|ruby|node|nodejs|php[0-9.]*|lua)$")
_FETCHERS = _words("curl wget")
_REMOVERS = _words("rm rmdir unlink shred")

# Commands that change the files they are given: none of them may name a path outside.
_WRITES_EVERY_OPERAND = _words("mv tee touch truncate mkdir chmod chown chgrp chattr setfacl")
_WRITES_LAST_OPERAND = _words("cp ln install rsync")
# Options whose value is a file or directory the command writes to: (short, long).
_DESTINATION_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "curl": (_words("-o"), _words("--output --output-dir")),
    "wget": (
        _words("-O -P -o -a"),
        _words("--output-document --directory-prefix --output-file --append-output"),
    ),
    "tar": (_words("-C"), _words("--directory")),
    "unzip": (_words("-d"), frozenset()),
    "sort": (_words("-o"), _words("--output")),
    "git": (frozenset(), _words("--output")),
    **{
        name: (_words("-t"), _words("--target-directory")) for name in ("cp", "mv", "ln", "install")
    },
}

_FIND_TESTS = _words(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -newer "
    "-mtime -mmin -atime -amin -ctime -cmin -size -empty -perm -user -group -links -inum "
    "-samefile -lname -ilname -uid -gid -nouser -nogroup"
)

# git: reading history and changing the working tree and index are the model's; history,
# refs, configuration and remotes are loopworks'.
_GIT_READ_AND_WORKTREE = _words(
    "status diff log show blame annotate grep ls-files ls-tree rev-parse rev-list describe "
    "shortlog cat-file diff-files diff-index diff-tree check-ignore check-attr whatchanged "
    "name-rev merge-base count-objects version help add rm mv restore apply"
)
_GIT_HISTORY = _words(
    "commit reset rebase merge cherry-pick revert tag update-ref reflog filter-branch "
    "filter-repo replace gc prune stash switch worktree submodule notes am init clean "
    "symbolic-ref update-index read-tree commit-tree write-tree pack-refs repack fsck bisect"
)
_GIT_REMOTE = _words(
    "push remote fetch pull clone ls-remote send-email request-pull daemon credential "
    "archive bundle"
)
_GIT_BRANCH_CHANGES = _words(
    "-d -D -m -M -c -C -f --delete --move --copy --force -u --set-upstream-to "
    "--unset-upstream --edit-description --track"
)

# Text rules: applied to the whole command (and every nested one) besides parsing,
# on its normalised text (quotes and backslashes removed), so quoting or an interpreter's -c
# string does not hide them.
_SECRET_VAR = re.compile(r"\$\{?[!#]?([A-Za-z_][A-Za-z0-9_]*)")
_SECRET_ACCESS = re.compile(
    r"(?:environ|getenv|\bENV\b|process\.env)[^\n;]{0,16}?"
    r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|ANTHROPIC_|AWS_|GITHUB_)"
)
_PROC_ENVIRON = re.compile(r"/proc/\S*environ")
_FORK_BOMB = re.compile(r"([^\s(){};|&<>]+)\(\)\{[^}]*?\1\|\1&|function(\w+)\{[^}]*?\2\|\2&")
_RM_EVERYTHING = re.compile(
    r"(?:^|[\s;&|(`])rm\s+(?:-\S+\s+)*?(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\s+(?:-\S+\s+)*"
    r"(?:/|~|\*(?=$|[\s;&|)])|\.\.|\.(?=/?(?:$|[\s;&|)])))"
)
_PIPE_TO_SHELL = re.compile(
    r"\b(?:curl|wget)\b.*\|\s*(?:sudo\s+)?(?:\S*/)?(?:ba|z|da|k|a|mk|fi|tc|c)?sh\b"
)
# Credential stores outside the workspace (absolute, ~ or ../ paths).
_SECRET_FILE = re.compile(
    r"(?:^|[\s=(<>:,\[])(?:/|~|\.\./)\S*?(?:secret|credential|passw|shadow|token|\.netrc|"
    r"\.ssh/|\.aws/|\.gnupg|\.pgpass|\.git-credentials|id_rsa|id_ed25519|\.docker/config)",
    re.IGNORECASE,
)
_MKFS = re.compile(r"(?:^|[^\w.-])mkfs\b")
_DD_DEVICE = re.compile(r"\bdd\b.*\bof=/dev/")
_GIT_INTERNALS = re.compile(r"\.git/+(?:config|hooks)\b")
_GIT_PUSH = re.compile(r"\bgit\s+(?:-\S+\s+)*push\b")


def _normalised(text: str) -> str:
    text = text.replace("\\\n", "")
    text = re.sub(r"[\"'\\]", "", text)
    return re.sub(r"[ \t]+", " ", text)


def _brace_alternatives(word: str, limit: int = 64) -> list[str]:
    """The words a brace expansion like {/,x} or pre{a,b}post stands for (one word otherwise)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not match or limit <= 0:
        return [word]
    out: list[str] = []
    for alt in match.group(1).split(","):
        out.extend(
            _brace_alternatives(word[: match.start()] + alt + word[match.end() :], limit // 2)
        )
    return out


def _assignment(word: str) -> None:
    """Refuse variable assignments that point git elsewhere or redirect `cd`."""
    name = word.split("=", 1)[0].rstrip("+")
    if name.startswith("GIT_") or name == "CDPATH":
        raise ToolDenied(f"refusing: setting {name} (pointing git or cd outside the workspace)")


def _outside(word: str) -> bool:
    """Whether a path operand names something outside the workspace (absolute, ~, or ..)."""
    if word in _HARMLESS_DEVICES or re.fullmatch(r"/dev/fd/\d+", word):
        return False
    return word.startswith(("/", "~")) or ".." in word.split("/")


def _into_git(word: str) -> bool:
    return _has_git_component(word.split("/"))


def _computed(word: str) -> bool:
    return "$" in word or "`" in word


def _operands(args: list[str]) -> tuple[list[str], list[str]]:
    """(options, operands) of an argument list, honouring `--`."""
    options: list[str] = []
    operands: list[str] = []
    only_operands = False
    for arg in args:
        if only_operands or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            only_operands = True
        else:
            options.append(arg)
    return options, operands


def _option_values(args: list[str], short: frozenset[str], long: frozenset[str]) -> list[str]:
    """Values given to the named options: `-o X`, `-oX`, `--output X`, `--output=X`."""
    values: list[str] = []
    for k, arg in enumerate(args):
        following = args[k + 1] if k + 1 < len(args) else ""
        if arg in short or arg in long:
            values.append(following)
        elif any(arg.startswith(opt + "=") for opt in long):
            values.append(arg.split("=", 1)[1])
        elif not arg.startswith("--") and any(
            arg.startswith(opt) and len(arg) > len(opt) for opt in short
        ):
            values.append(arg[2:])
    return values


def _skip_options(args: list[str], with_value: frozenset[str] = frozenset()) -> list[str]:
    """args after the leading options (and their values) of a wrapper like nice or timeout."""
    k = 0
    while k < len(args) and args[k].startswith("-") and args[k] != "-":
        if args[k] == "--":
            return args[k + 1 :]
        k += 2 if args[k] in with_value else 1
    return args[k:]


class _CommandPolicy:
    """Walks one command line: every simple command in it, recursively, then text rules."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _escapes(self, word: str, follow_last: bool = True) -> bool:
        """Whether a relative path leads out of the workspace through a symlink already there."""
        if not word or word.startswith("/") or _computed(word) or any(c in word for c in "*?["):
            return False  # absolute paths are judged as text; expansions cannot be resolved
        path = self.root / word
        try:
            if follow_last or word.endswith("/"):
                target = path.resolve()
            else:  # the entry itself (rm of a symlink removes the link, not its target)
                target = path.parent.resolve() / path.name
        except (OSError, RuntimeError):
            return True
        return target != self.root and self.root not in target.parents

    def check(self, cmd: str, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ToolDenied("refusing: commands nested too deeply to check")
        segments, nested = _parse(cmd)
        for inner in nested:
            self.check(inner, depth + 1)
        fetched = False  # a curl/wget earlier in the current pipeline
        for segment in segments:
            if not segment.piped:
                fetched = False
            for target in segment.writes:
                self._write_target(_unquote(target), "redirecting output")
            try:
                words = shlex.split(segment.text)
            except ValueError as exc:
                raise _unbalanced(str(exc)) from exc
            fetched = self._simple(words, segment, fetched, depth) or fetched
        # Last, so the precise reasons above come first; these catch what parsing cannot see
        # (an interpreter's -c string, obfuscated quoting, variable names).
        self._text_rules(cmd)

    # -- whole-text rules ------------------------------------------------------------------------

    def _text_rules(self, cmd: str) -> None:
        norm = _normalised(cmd)
        for match in _SECRET_VAR.finditer(cmd):
            if secret_name(match.group(1)):
                raise ToolDenied(
                    f"refusing: reading the secret-looking variable ${match.group(1)} "
                    "(tools run without API keys, tokens or credentials)"
                )
        if "${!" in cmd:
            raise ToolDenied("refusing: indirect variable expansion ${!...}")
        if _SECRET_ACCESS.search(norm):
            raise ToolDenied("refusing: reading secret-looking environment variables")
        if _PROC_ENVIRON.search(norm):
            raise ToolDenied("refusing: reading a process's environment from /proc/*/environ")
        if _FORK_BOMB.search(re.sub(r"\s+", "", cmd)):
            raise ToolDenied("refusing: fork bomb")
        if _RM_EVERYTHING.search(norm):
            raise ToolDenied(
                "refusing: rm -r of /, ~, *, . or .. (outside or all of the workspace)"
            )
        if _PIPE_TO_SHELL.search(norm):
            raise ToolDenied("refusing: piping downloaded content into a shell")
        if _SECRET_FILE.search(norm):
            raise ToolDenied("refusing: reading credential files outside the workspace")
        if _MKFS.search(norm):
            raise ToolDenied("refusing: mkfs (disk and filesystem administration)")
        if _DD_DEVICE.search(norm):
            raise ToolDenied("refusing: dd writing to a device")
        if _GIT_INTERNALS.search(norm):
            raise ToolDenied(
                "refusing: touching .git/config or .git/hooks (the run's repository is not yours "
                "to configure)"
            )
        if _GIT_PUSH.search(norm):
            raise ToolDenied("refusing: git push (loopworks publishes the run's work itself)")

    # -- one simple command ----------------------------------------------------------------------

    def _simple(self, words: list[str], segment: _Segment, fetched: bool, depth: int) -> bool:
        """Check one simple command; return whether it downloads (for the rest of its pipeline)."""
        while words and words[0] in _RESERVED:
            words = words[1:]
        if words and words[0] == "time":
            words = _skip_options(words[1:])
        if not words or words[0] in _NOT_A_COMMAND:
            return False
        while words and _ASSIGNMENT.match(words[0]):
            _assignment(words[0])
            words = words[1:]
        if not words:
            return False
        return self._argv(words, segment, fetched, depth)

    def _argv(self, argv: list[str], segment: _Segment, fetched: bool, depth: int) -> bool:
        # bash brace-expands every word: {rm,-rf,/} is `rm -rf /`.
        argv = [alt for word in argv for alt in _brace_alternatives(word)]
        argv, via_xargs = self._unwrap(argv, depth)
        if not argv:
            return False
        if _computed(argv[0]):
            raise ToolDenied(
                f"refusing: a command name built from a variable or substitution ({argv[0]}); "
                "write the command literally"
            )
        if argv[0] not in ("[", "[[") and any(ch in argv[0] for ch in "*?["):
            raise ToolDenied(
                f"refusing: a command name with glob characters ({argv[0]}); write it literally"
            )
        name = os.path.basename(argv[0])
        args = argv[1:]
        for arg in args:
            if any(ch in arg for ch in "*?[") and _proc_environ_glob(arg):
                raise ToolDenied("refusing: reading a process's environment from /proc/*/environ")
            if _outside(arg) and _SECRET_FILE.search(arg):
                raise ToolDenied(
                    f"refusing: reading credential files outside the workspace ({arg})"
                )
        if via_xargs and name in _REMOVERS:
            raise ToolDenied(
                f"refusing: {name} of paths read by xargs; use `find . ... -delete` or "
                "`find . ... -exec rm {} +`"
            )

        if name in _REFUSED_PROGRAMS or name.startswith("mkfs."):
            why = _REFUSED_PROGRAMS.get(name, "disk and filesystem administration")
            raise ToolDenied(f"refusing: {name} ({why})")
        self._environment_listing(name, args)
        if name == "kill" and "-1" in args[1:]:
            raise ToolDenied("refusing: kill -1 (every process the worker's user owns)")
        if name == "ps" and any(not a.startswith("-") and "e" in a for a in args):
            raise ToolDenied("refusing: ps e (shows other processes' environments)")
        if name == "dd" and any(a.startswith("of=") for a in args):
            raise ToolDenied("refusing: dd of= (write files with write_file)")
        if name in ("cd", "pushd"):
            self._cd(args)

        if name in _REMOVERS:
            self._rm(name, args)
        elif name in _WRITES_EVERY_OPERAND:
            for operand in _operands(args)[1]:
                self._write_target(operand, name)
        elif name in _WRITES_LAST_OPERAND:
            operands = _operands(args)[1]
            for operand in operands[-1:] if len(operands) > 1 else []:
                self._write_target(operand, name)
            if name == "ln":  # a link to outside would let later writes escape
                for operand in operands[:-1] if len(operands) > 1 else operands:
                    if _outside(operand) or self._escapes(operand):
                        raise ToolDenied(
                            f"refusing: ln to a path outside the workspace ({operand})"
                        )
        elif name == "sed":
            self._sed(args)
        elif name == "find":
            self._find(args, segment, depth)
        elif name == "git":
            self._git(args)

        if name in _DESTINATION_OPTIONS:
            short, long = _DESTINATION_OPTIONS[name]
            for value in _option_values(args, short, long):
                self._write_target(value, f"{name} writing")

        if name in _SHELLS:
            self._shell(name, args, segment, depth)
        elif segment.piped and fetched and _INTERPRETER.match(name):
            raise ToolDenied(f"refusing: piping downloaded content into {name}")
        return name in _FETCHERS

    def _unwrap(self, argv: list[str], depth: int) -> tuple[list[str], bool]:
        """Strip wrappers that run another command (env, nice, timeout, xargs, exec, ...).

        Returns the wrapped command and whether xargs feeds it arguments.
        """
        via_xargs = False
        for _ in range(16):
            if not argv:
                return argv, via_xargs
            name = os.path.basename(argv[0])
            rest = argv[1:]
            if name in _PLAIN_WRAPPERS:
                if name == "command" and rest[:1] in (["-v"], ["-V"]):
                    return [], via_xargs  # command -v NAME only looks the name up
                argv = _skip_options(rest, frozenset({"-a"}))
            elif name == "nice":
                argv = _skip_options(rest, frozenset({"-n"}))
            elif name == "ionice":
                argv = _skip_options(rest, frozenset({"-c", "-n", "-p"}))
            elif name == "timeout":
                rest = _skip_options(rest, frozenset({"-s", "-k", "--signal", "--kill-after"}))
                argv = rest[1:]  # the duration
            elif name == "stdbuf":
                argv = _skip_options(rest, frozenset({"-i", "-o", "-e"}))
            elif name == "xargs":
                via_xargs = True
                argv = _skip_options(
                    rest, frozenset({"-I", "-n", "-P", "-L", "-l", "-d", "-E", "-e", "-s", "-a"})
                )
            elif name == "env":
                argv = self._env(rest, depth)
            elif name == "eval":
                self.check(" ".join(rest), depth + 1)
                return [], via_xargs
            elif name == "watch":
                rest = _skip_options(rest, frozenset({"-n", "-d", "--interval"}))
                self.check(" ".join(rest), depth + 1)
                return [], via_xargs
            else:
                return argv, via_xargs
            while argv and _ASSIGNMENT.match(argv[0]):
                _assignment(argv[0])
                argv = argv[1:]
        raise ToolDenied("refusing: too many command wrappers to check")

    def _env(self, args: list[str], depth: int) -> list[str]:
        k = 0
        while k < len(args):
            arg = args[k]
            if arg in ("-S", "--split-string"):
                self.check(" ".join(args[k + 1 :]), depth + 1)
                return []
            if arg.startswith(("-S", "--split-string=")):
                text = arg.split("=", 1)[1] if arg.startswith("--") else arg[2:]
                self.check(" ".join([text, *args[k + 1 :]]), depth + 1)
                return []
            if arg in ("-u", "--unset", "-C", "--chdir"):
                if arg in ("-C", "--chdir") and k + 1 < len(args) and _outside(args[k + 1]):
                    raise ToolDenied("refusing: env -C outside the workspace")
                k += 2
            elif arg == "--":
                k += 1
                break
            elif arg.startswith("-"):
                k += 1
            elif _ASSIGNMENT.match(arg):
                _assignment(arg)
                k += 1
            else:
                break
        if k >= len(args):
            raise ToolDenied("refusing: env without a command lists the environment")
        return args[k:]

    # -- rule helpers ----------------------------------------------------------------------------

    def _environment_listing(self, name: str, args: list[str]) -> None:
        options, operands = _operands(args)
        if name == "export" and (not args or args == ["-p"]):
            raise ToolDenied("refusing: export -p lists the environment")
        if name in ("export", "declare", "typeset", "local", "readonly"):
            for operand in operands:
                _assignment(operand)
        if name in ("declare", "typeset") and not operands:
            raise ToolDenied(f"refusing: {name} without names lists variables")
        if name == "set" and not args:
            raise ToolDenied("refusing: set without arguments lists variables")
        if name == "compgen" and any(o in ("-e", "-v") or o.startswith("-A") for o in options):
            raise ToolDenied("refusing: compgen listing variables")

    def _write_target(self, target: str, what: str) -> None:
        for word in _brace_alternatives(target):
            if _outside(word):
                raise ToolDenied(
                    f"refusing: {what} outside the workspace ({word}); use paths relative to the "
                    "workspace"
                )
            if self._escapes(word):
                raise ToolDenied(
                    f"refusing: {what} through a symlink leading outside the workspace ({word})"
                )
            if _into_git(word):
                raise ToolDenied(
                    f"refusing: {what} into .git ({word}); the run's history is not yours to edit"
                )

    def _rm(self, name: str, args: list[str]) -> None:
        options, operands = _operands(args)
        recursive = any(
            o == "--recursive" or (not o.startswith("--") and ("r" in o or "R" in o))
            for o in options
        )
        shown = f"{name} -r" if recursive else name
        if not operands:
            return
        for operand in operands:
            for word in _brace_alternatives(operand):
                if _outside(word):
                    raise ToolDenied(f"refusing: {shown} outside the workspace ({word})")
                if self._escapes(word, follow_last=False):
                    raise ToolDenied(
                        f"refusing: {shown} through a symlink leading outside the workspace "
                        f"({word})"
                    )
                if _into_git(word):
                    raise ToolDenied(
                        f"refusing: {shown} of .git ({word}); the run's history is not yours"
                    )
                if not recursive:
                    continue
                bare = re.sub(r"^(?:\./+)+", "", word).rstrip("/")
                if re.fullmatch(r"[.*?/\[\]!^]*", bare):
                    raise ToolDenied(
                        f"refusing: {shown} of {word!r} would delete the whole workspace"
                    )
                if _computed(word):
                    raise ToolDenied(
                        f"refusing: {shown} of a computed path ({word}); name the directory "
                        "literally"
                    )

    def _cd(self, args: list[str]) -> None:
        operands = _operands(args)[1]
        for operand in operands[:1]:
            if operand == "-":
                continue
            if _outside(operand) or _computed(operand) or self._escapes(operand):
                raise ToolDenied(f"refusing: cd outside the workspace ({operand})")
            if _into_git(operand):
                raise ToolDenied(f"refusing: cd into .git ({operand})")

    def _sed(self, args: list[str]) -> None:
        if not any(a.startswith("-i") or a.startswith("--in-place") for a in args):
            return
        options, operands = _operands(args)
        scripted = any(
            o in ("-e", "-f") or o.startswith(("--expression", "--file")) for o in options
        )
        files = operands if scripted else operands[1:]
        for operand in files:
            self._write_target(operand, "sed -i")

    def _find(self, args: list[str], segment: _Segment, depth: int) -> None:
        k = 0
        while k < len(args) and args[k] in ("-H", "-L", "-P"):
            k += 1
        starts: list[str] = []
        while k < len(args) and not args[k].startswith(("-", "(", "!")):
            starts.append(args[k])
            k += 1
        expression = args[k:]
        acting = {
            "-delete",
            "-exec",
            "-execdir",
            "-ok",
            "-okdir",
            "-fprint",
            "-fprint0",
            "-fprintf",
            "-fls",
        }
        if acting.intersection(expression):
            for start in starts:
                self._write_target(start, "find -delete/-exec")
        removes = "-delete" in expression or any(
            word in ("-exec", "-execdir", "-ok", "-okdir")
            and k + 1 < len(expression)
            and os.path.basename(expression[k + 1]) in _REMOVERS
            for k, word in enumerate(expression)
        )
        if removes and not _FIND_TESTS.intersection(expression):
            raise ToolDenied(
                "refusing: find deleting without a test (-name, -path, -type, ...) deletes "
                "everything, .git included"
            )
        for k, word in enumerate(expression):
            if word in ("-exec", "-execdir", "-ok", "-okdir"):
                sub: list[str] = []
                for part in expression[k + 1 :]:
                    if part in (";", "+"):
                        break
                    sub.append(part)
                if sub:
                    self._argv(sub, _Segment(text="", piped=False), False, depth + 1)
            elif word in ("-fprint", "-fprint0", "-fprintf", "-fls") and k + 1 < len(expression):
                self._write_target(expression[k + 1], f"find {word}")

    def _git(self, args: list[str]) -> None:
        k = 0
        while k < len(args) and args[k].startswith("-"):
            opt = args[k]
            if opt == "-C":
                if k + 1 < len(args) and (_outside(args[k + 1]) or _into_git(args[k + 1])):
                    raise ToolDenied("refusing: git -C outside the workspace")
                k += 2
                continue
            if opt == "-c" or opt.startswith(("--config-env", "-c")):
                raise ToolDenied(
                    "refusing: git -c (per-command configuration can run arbitrary programs)"
                )
            if opt.startswith(("--git-dir", "--work-tree", "--exec-path", "--namespace")):
                raise ToolDenied(f"refusing: git {opt} (pointing git at another repository)")
            k += 1
        if k >= len(args):
            return
        sub, rest = args[k], args[k + 1 :]
        if sub == "config":
            raise ToolDenied(
                "refusing: git config (the repository's configuration is not yours to change)"
            )
        if sub in _GIT_REMOTE:
            raise ToolDenied(
                f"refusing: git {sub} (no remote access; loopworks publishes the run's work)"
            )
        if sub in _GIT_HISTORY:
            raise ToolDenied(
                f"refusing: git {sub} (the run's history is recorded by loopworks; edit files "
                "and leave commits to it)"
            )
        if sub == "branch":
            if _operands(rest)[1] or _GIT_BRANCH_CHANGES.intersection(rest):
                raise ToolDenied("refusing: git branch changes (only listing branches is allowed)")
            return
        if sub == "checkout":
            if "--" not in rest:
                raise ToolDenied(
                    "refusing: git checkout of a branch or commit; `git checkout -- <paths>` "
                    "(or git restore) to restore files is allowed"
                )
            return
        if sub == "grep" and any(a.startswith(("-O", "--open-files-in-pager")) for a in rest):
            raise ToolDenied("refusing: git grep -O (runs a program)")
        if sub == "apply" and "--unsafe-paths" in rest:
            raise ToolDenied("refusing: git apply --unsafe-paths (writes outside the worktree)")
        if sub not in _GIT_READ_AND_WORKTREE:
            raise ToolDenied(
                f"refusing: git {sub} is not among the allowed git commands "
                f"({', '.join(sorted(_GIT_READ_AND_WORKTREE))})"
            )

    def _shell(self, name: str, args: list[str], segment: _Segment, depth: int) -> None:
        k = 0
        runs_string = False
        while k < len(args) and args[k][:1] in ("-", "+") and args[k] not in ("-", "--"):
            opt = args[k]
            if not opt.startswith("--") and "c" in opt:
                runs_string = True
            k += 2 if opt in ("-o", "+o", "-O", "+O") else 1
        if k < len(args) and args[k] == "--":
            k += 1
        operands = args[k:]
        if runs_string:
            if operands:
                self.check(operands[0], depth + 1)
            return
        reads_stdin = not operands or "-s" in args[:k] or operands[0] == "-"
        if not reads_stdin:
            return  # runs a script file
        if segment.piped:
            raise ToolDenied(f"refusing: piping into a shell ({name})")
        for text in segment.stdin:
            self.check(text, depth + 1)


def _proc_environ_glob(word: str) -> bool:
    """Whether a (possibly globbed) path could name some process's environ file."""
    return any(
        fnmatch.fnmatchcase(candidate, word)
        for candidate in ("/proc/self/environ", "/proc/1/environ", "/proc/thread-self/environ")
    )
