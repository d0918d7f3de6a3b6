"""Rules applied to a command's whole text besides parsing it: a backstop for what parsing misses.

Matched on the normalised text (quotes and backslashes removed) of the command and of every
command nested in it, so quoting, an interpreter's `-c` string or a variable name cannot hide a
fork bomb, `rm -rf /`, a download piped into a shell, or a read of secrets.
"""

from __future__ import annotations

import fnmatch
import re

from loopworks.agent.tools.denied import ToolDenied
from loopworks.agent.tools.environment import SECRET_PREFIXES, SECRET_WORDS, secret_name

_SECRET_VAR = re.compile(r"\$\{?[!#]?([A-Za-z_][A-Za-z0-9_]*)")
# The same words `secret_name` looks for, spelled after a way of reading the environment.
_SECRET_ACCESS = re.compile(
    r"(?:environ|getenv|\bENV\b|process\.env)[^\n;]{0,16}?"
    rf"(?:{'|'.join(SECRET_WORDS + SECRET_PREFIXES)})"
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
SECRET_FILE = re.compile(
    r"(?:^|[\s=(<>:,\[])(?:/|~|\.\./)\S*?(?:secret|credential|passw|shadow|token|\.netrc|"
    r"\.ssh/|\.aws/|\.gnupg|\.pgpass|\.git-credentials|id_rsa|id_ed25519|\.docker/config)",
    re.IGNORECASE,
)
_MKFS = re.compile(r"(?:^|[^\w.-])mkfs\b")
_DD_DEVICE = re.compile(r"\bdd\b.*\bof=/dev/")
_GIT_INTERNALS = re.compile(r"\.git/+(?:config|hooks)\b")
_GIT_PUSH = re.compile(r"\bgit\s+(?:-\S+\s+)*push\b")


def check_text(cmd: str) -> None:
    """Raise ToolDenied when the text of `cmd` matches one of the rules."""
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
        raise ToolDenied("refusing: rm -r of /, ~, *, . or .. (outside or all of the workspace)")
    if _PIPE_TO_SHELL.search(norm):
        raise ToolDenied("refusing: piping downloaded content into a shell")
    if SECRET_FILE.search(norm):
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


def proc_environ_glob(word: str) -> bool:
    """Whether a (possibly globbed) path could name some process's environ file."""
    return any(
        fnmatch.fnmatchcase(candidate, word)
        for candidate in ("/proc/self/environ", "/proc/1/environ", "/proc/thread-self/environ")
    )


def _normalised(text: str) -> str:
    # Quotes and backslashes removed: r"m", 'rm' and \rm all read as rm.
    text = text.replace("\\\n", "")
    text = re.sub(r"[\"'\\]", "", text)
    return re.sub(r"[ \t]+", " ", text)
