"""What every git process loopworks starts is told on its command line, before its own
arguments: run no program a repository names, and ask no credential but ours
(SECURITY.md, "git runs no program of a repository it did not create" and "Git
credentials go only to the hosts and repositories they are for").

Command-line config outranks every config file git reads, a repository's included; the
one place it does not reach is the program git starts in a repository on this machine
for a local push or fetch, which `serving_program` names itself.
"""

from __future__ import annotations

import shlex
import sys

from loopworks.schemas.git_names import is_url

# The one credential helper git may use: answers for configured https hosts only
# (schemas/git_credentials.py). `!` makes git run it through the shell, hence the quoting.
CREDENTIAL_HELPER = f"!{shlex.quote(sys.executable)} -m loopworks.workspace.git_credential"
# Before it, an empty `credential.helper` clears every helper git's config files named
# (system, global, a repository's, url-scoped ones): command-line config is read last.
# core.askPass empty and GIT_ASKPASS empty leave git no program to ask for a password.
# No redirects: an admitted host must not send git on to one the origin policy refuses
# (workspace/origin_policy.py judged the host named, not where it redirects).
_CLEAR_HELPERS = ("-c", "credential.helper=")
_CREDENTIAL_CONFIG = (
    "-c",
    f"credential.helper={CREDENTIAL_HELPER}",
    "-c",
    "core.askPass=",
    "-c",
    "http.followRedirects=false",
)


# What git would otherwise run on a repository's behalf, switched off for every git process
# this module starts. An origin named by a client, a clone's content, and a clone's .git
# written by a model (with LOOPS_SANDBOX=off) are not ours: their hooks, config and
# attributes must start no program. Command-line config outranks a repository's own, so
# each setting that names a program, or makes git run one, is given here:
HARDENING = (
    # Hooks, every one (pre-receive, reference-transaction, post-update, proc-receive,
    # push-to-checkout, pre-auto-gc, ...), from .git/hooks or any core.hooksPath.
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    # receive-pack would run this to advertise the tips of a store the repository borrows
    # (objects/info/alternates): `true` names none, so none are advertised.
    "core.alternateRefsCommand=true",
    # Nothing is signed or verified, and what would sign or verify is git's default program
    # on the worker's PATH, never one a repository names.
    "log.showSignature=false",
    "merge.verifySignatures=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "push.gpgSign=false",
    "gpg.program=gpg",
    "gpg.openpgp.program=gpg",
    "gpg.x509.program=gpgsm",
    "gpg.ssh.program=ssh-keygen",
    # A push to a non-bare repository's checked-out branch is refused (git's default)
    # rather than checked out there (updateInstead), which would run that repository's
    # filters and push-to-checkout hook.
    "receive.denyCurrentBranch=refuse",
    # A bare repository is used only where it is named (--git-dir, a path to clone or push
    # to), never found by looking around: a clone's content can hold one (HEAD, objects/,
    # refs/ and a `config` naming programs) wherever git would look.
    "safe.bareRepository=explicit",
)
_HARDENING_ARGS = tuple(arg for setting in HARDENING for arg in ("-c", setting))
# For a push to or a fetch from a repository on this machine, git starts receive-pack or
# upload-pack in that repository itself, with our `-c` settings cleared (they are the
# environment's GIT_CONFIG_PARAMETERS, which git drops for the local transport): so the
# settings are given again on the command line of the program it starts there.
UPLOAD_PACK = shlex.join(["git", *_HARDENING_ARGS, "upload-pack"])
RECEIVE_PACK = shlex.join(["git", *_HARDENING_ARGS, "receive-pack"])
# What every git process this module starts is given before its own arguments...
ALWAYS_ARGS = (*_HARDENING_ARGS, *_CLEAR_HELPERS, *_CREDENTIAL_CONFIG)
# ...or, for the one user of a `loops up` on loopback (LOOPS_GIT_USER_HELPERS), the same
# without clearing the helpers their own git config names: theirs are asked before ours.
WITH_USER_HELPERS_ARGS = (*_HARDENING_ARGS, *_CREDENTIAL_CONFIG)


def path_scoped(hosts: list[str]) -> tuple[str, ...]:
    """The settings that make git tell the credential helper which repository it asks
    for (`path=`), on the hosts whose credential names the origins it serves
    (schemas/git_credentials.py): scoped to those hosts, so another host's helper (a
    `loops up` user's `store`) is asked as it always was."""
    return tuple(
        arg for host in hosts for arg in ("-c", f"credential.https://{host}.useHttpPath=true")
    )


# Objects a repository lacks are never fetched on its behalf: a partial clone's promisor
# remote is its config (its url, uploadpack, sshCommand, credential helper).
NO_LAZY_FETCH = {"GIT_NO_LAZY_FETCH": "1"}


def serving_program(url: str, subcommand: str) -> list[str]:
    """The option that gives the hardened program git starts on the far side of `url` for
    `subcommand` (push: receive-pack; clone, fetch, ls-remote: upload-pack), when that
    side is a repository on this machine; none for a server, which runs its own."""
    if is_url(url) and not url.startswith("file://"):
        return []
    if subcommand == "push":
        return [f"--receive-pack={RECEIVE_PACK}"]
    return [f"--upload-pack={UPLOAD_PACK}"]
