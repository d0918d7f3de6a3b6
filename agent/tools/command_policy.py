"""The rules a shell command passes: every simple command in it, however nested, then its text.

`CommandPolicy.check` parses the command (`shell_words`), checks each substitution as a command
of its own, and for each simple command strips the wrappers that run another command (`env`,
`xargs`, `timeout`, `bash -c`, `eval`, ...) to judge the program really run: refused programs,
listing the environment, file changes outside the workspace (`file_rules`), git (`git_policy`),
downloads piped into an interpreter. The whole-text rules (`text_rules`) come last, as a
backstop for what parsing cannot see.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from loopworks.agent.tools.arguments import names, operands, skip_options
from loopworks.agent.tools.denied import ToolDenied
from loopworks.agent.tools.file_rules import REMOVERS, FileRules
from loopworks.agent.tools.git_policy import check_git
from loopworks.agent.tools.shell_words import (
    Segment,
    ShellSyntaxError,
    brace_alternatives,
    parse,
    unquote,
)
from loopworks.agent.tools.text_rules import SECRET_FILE, check_text, proc_environ_glob
from loopworks.agent.tools.workspace_paths import computed, outside

# bash -c "...", eval, $(...) inside $(...): deeper than this is refused rather than analysed.
_MAX_DEPTH = 8

_RESERVED = frozenset(
    {"{", "}", "!", "then", "do", "else", "elif", "if", "while", "until", "fi", "done", "esac"}
)
_NOT_A_COMMAND = frozenset({"for", "case", "select", "function", "in", "[[", "]]"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")

# Programs refused whatever their arguments, with the reason the model is given.
_REFUSED_PROGRAMS: dict[str, str] = {
    name: why
    for programs, why in (
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
    for name in programs.split()
}

_PLAIN_WRAPPERS = names("command builtin exec nohup setsid unbuffer busybox coproc")
_SHELLS = names("sh bash zsh dash ksh ash mksh fish tcsh csh")
_INTERPRETER = re.compile(r"^(?:python[0-9.]*|perl[0-9.]*|ruby|node|nodejs|php[0-9.]*|lua)$")
_FETCHERS = names("curl wget")


def _unparsable(what: str) -> ToolDenied:
    return ToolDenied(f"refusing: could not parse the command ({what})")


def _assignment(word: str) -> None:
    """Refuse variable assignments that point git elsewhere or redirect `cd`."""
    name = word.split("=", 1)[0].rstrip("+")
    if name.startswith("GIT_") or name == "CDPATH":
        raise ToolDenied(f"refusing: setting {name} (pointing git or cd outside the workspace)")


def _environment_listing(name: str, args: list[str]) -> None:
    """Refuse builtins that print variables (secrets included) or export a GIT_/CDPATH value."""
    options, found = operands(args)
    if name == "export" and (not args or args == ["-p"]):
        raise ToolDenied("refusing: export -p lists the environment")
    if name in ("export", "declare", "typeset", "local", "readonly"):
        for operand in found:
            _assignment(operand)
    if name in ("declare", "typeset") and not found:
        raise ToolDenied(f"refusing: {name} without names lists variables")
    if name == "set" and not args:
        raise ToolDenied("refusing: set without arguments lists variables")
    if name == "compgen" and any(o in ("-e", "-v") or o.startswith("-A") for o in options):
        raise ToolDenied("refusing: compgen listing variables")


class CommandPolicy:
    """Walks one command line: every simple command in it, recursively, then text rules."""

    def __init__(self, root: Path) -> None:
        self.files = FileRules(root)

    def check(self, cmd: str, depth: int) -> None:
        """Raise ToolDenied unless `cmd`, nested `depth` commands deep, passes every rule."""
        if depth > _MAX_DEPTH:
            raise ToolDenied("refusing: commands nested too deeply to check")
        try:
            segments, nested = parse(cmd)
        except ShellSyntaxError as exc:
            raise _unparsable(str(exc)) from exc
        for inner in nested:
            self.check(inner, depth + 1)
        fetched = False  # a curl/wget earlier in the current pipeline
        for segment in segments:
            if not segment.piped:
                fetched = False
            for target in segment.writes:
                self.files.write_target(unquote(target), "redirecting output")
            try:
                words = shlex.split(segment.text)
            except ValueError as exc:
                raise _unparsable(str(exc)) from exc
            fetched = self._simple(words, segment, fetched, depth) or fetched
        # Last, so the precise reasons above come first; these catch what parsing cannot see
        # (an interpreter's -c string, obfuscated quoting, variable names).
        check_text(cmd)

    # -- one simple command ----------------------------------------------------------------------

    def _simple(self, words: list[str], segment: Segment, fetched: bool, depth: int) -> bool:
        """Check one simple command; return whether it downloads (for the rest of its pipeline)."""
        while words and words[0] in _RESERVED:
            words = words[1:]
        if words and words[0] == "time":
            words = skip_options(words[1:])
        if not words or words[0] in _NOT_A_COMMAND:
            return False
        while words and _ASSIGNMENT.match(words[0]):
            _assignment(words[0])
            words = words[1:]
        if not words:
            return False
        return self._argv(words, segment, fetched, depth)

    def _argv(self, argv: list[str], segment: Segment, fetched: bool, depth: int) -> bool:
        # bash brace-expands every word: {rm,-rf,/} is `rm -rf /`.
        argv = [alt for word in argv for alt in brace_alternatives(word)]
        argv, via_xargs = self._unwrap(argv, depth)
        if not argv:
            return False
        if computed(argv[0]):
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
            if any(ch in arg for ch in "*?[") and proc_environ_glob(arg):
                raise ToolDenied("refusing: reading a process's environment from /proc/*/environ")
            if outside(arg) and SECRET_FILE.search(arg):
                raise ToolDenied(
                    f"refusing: reading credential files outside the workspace ({arg})"
                )
        if via_xargs and name in REMOVERS:
            raise ToolDenied(
                f"refusing: {name} of paths read by xargs; use `find . ... -delete` or "
                "`find . ... -exec rm {} +`"
            )

        if name in _REFUSED_PROGRAMS or name.startswith("mkfs."):
            why = _REFUSED_PROGRAMS.get(name, "disk and filesystem administration")
            raise ToolDenied(f"refusing: {name} ({why})")
        _environment_listing(name, args)
        if name == "kill" and "-1" in args[1:]:
            raise ToolDenied("refusing: kill -1 (every process the worker's user owns)")
        if name == "ps" and any(not a.startswith("-") and "e" in a for a in args):
            raise ToolDenied("refusing: ps e (shows other processes' environments)")
        if name == "dd" and any(a.startswith("of=") for a in args):
            raise ToolDenied("refusing: dd of= (write files with write_file)")

        if name == "git":
            check_git(args)

        def run_by_find(sub: list[str]) -> None:
            self._argv(sub, Segment(text="", piped=False), False, depth + 1)

        self.files.check(name, args, run_by_find)

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
                argv = skip_options(rest, frozenset({"-a"}))
            elif name == "nice":
                argv = skip_options(rest, frozenset({"-n"}))
            elif name == "ionice":
                argv = skip_options(rest, frozenset({"-c", "-n", "-p"}))
            elif name == "timeout":
                rest = skip_options(rest, frozenset({"-s", "-k", "--signal", "--kill-after"}))
                argv = rest[1:]  # the duration
            elif name == "stdbuf":
                argv = skip_options(rest, frozenset({"-i", "-o", "-e"}))
            elif name == "xargs":
                via_xargs = True
                argv = skip_options(
                    rest, frozenset({"-I", "-n", "-P", "-L", "-l", "-d", "-E", "-e", "-s", "-a"})
                )
            elif name == "env":
                argv = self._env(rest, depth)
            elif name == "eval":
                self.check(" ".join(rest), depth + 1)
                return [], via_xargs
            elif name == "watch":
                rest = skip_options(rest, frozenset({"-n", "-d", "--interval"}))
                self.check(" ".join(rest), depth + 1)
                return [], via_xargs
            else:
                return argv, via_xargs
            while argv and _ASSIGNMENT.match(argv[0]):
                _assignment(argv[0])
                argv = argv[1:]
        raise ToolDenied("refusing: too many command wrappers to check")

    def _env(self, args: list[str], depth: int) -> list[str]:
        """The command `env ARGS` runs, assignments checked; an `env -S` string is checked whole."""
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
                if arg in ("-C", "--chdir") and k + 1 < len(args) and outside(args[k + 1]):
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

    def _shell(self, name: str, args: list[str], segment: Segment, depth: int) -> None:
        """A shell's -c string and the stdin fed to it are commands too; a pipe into it is not."""
        k = 0
        runs_string = False
        while k < len(args) and args[k][:1] in ("-", "+") and args[k] not in ("-", "--"):
            opt = args[k]
            if not opt.startswith("--") and "c" in opt:
                runs_string = True
            k += 2 if opt in ("-o", "+o", "-O", "+O") else 1
        if k < len(args) and args[k] == "--":
            k += 1
        found = args[k:]
        if runs_string:
            if found:
                self.check(found[0], depth + 1)
            return
        reads_stdin = not found or "-s" in args[:k] or found[0] == "-"
        if not reads_stdin:
            return  # runs a script file
        if segment.piped:
            raise ToolDenied(f"refusing: piping into a shell ({name})")
        for text in segment.stdin:
            self.check(text, depth + 1)
