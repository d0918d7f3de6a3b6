"""What `loops up` chooses for the one user of a machine, when they have not: where the
sandbox's user can reach the workspaces, which local repositories runs may name, which
model answers, the key Temporal's payloads are encrypted with. A shared deployment sets
each of these itself (docs/configuration.md)."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

from loopworks.api import tokens
from loopworks.api.security import is_loopback
from loopworks.checks.bwrap import SandboxPolicy, reachable
from loopworks.schemas.payload_keys import ENV_VAR as PAYLOAD_KEYS_VAR
from loopworks.schemas.payload_keys import new_payload_key, parse_payload_keys
from loopworks.schemas.settings import Settings

log = logging.getLogger("loopworks.local")


def sandbox_workspaces(settings: Settings) -> Path | None:
    """A place for the runs' workspaces that the sandbox's user can reach, when the data
    directory is out of its reach: a root worker runs commands as `nobody`, which cannot
    enter a private home (a checkout under /root). None when the default will do."""
    if settings.sandbox == "off" or settings.workspaces_root or os.geteuid() != 0:
        return None
    policy = SandboxPolicy()
    data = settings.data_dir.resolve()
    data.mkdir(parents=True, exist_ok=True)
    if reachable(data, policy.uid, policy.gid):
        return None
    digest = hashlib.sha256(str(data).encode()).hexdigest()[:12]
    workspaces = Path(tempfile.gettempdir()) / f"loopworks-workspaces-{digest}"
    workspaces.mkdir(mode=0o755, exist_ok=True)
    workspaces.chmod(0o755)
    log.info("the sandbox's user cannot reach %s: workspaces go to %s", data, workspaces)
    return workspaces


def default_local_roots(settings: Settings, started_in: Path) -> str | None:
    """The local roots `loops up` gives its API and worker when none are set: the directory
    it was started from, for one user on loopback without tokens (`loops new --repo .`
    keeps working); a shared deployment names its own (LOOPS_LOCAL_ROOTS)."""
    if settings.local_roots is not None:
        return None
    if tokens.load(settings) or not is_loopback(settings.api_host):
        return None
    return str(started_in.resolve())


# What `loops up`'s summary says runs on when it chose the offline model itself.
OFFLINE_WITHOUT_KEY = "offline (no ANTHROPIC_API_KEY: set it to run on Anthropic)"


def local_model(settings: Settings) -> tuple[dict[str, str], str]:
    """The variables `loops up` gives its worker for the model, and the model its summary
    names. A key or LOOPS_LLM chooses as for any worker; with neither, `loops up` (and only
    it: a worker alone refuses) runs the offline model, so that the quick start needs
    nothing, and says so."""
    if settings.llm is None:
        return {"LOOPS_LLM": "offline"}, OFFLINE_WITHOUT_KEY
    return {}, settings.llm.value


# Where `loops up` keeps the payload keys it made, in the data directory: LOOPS_PAYLOAD_KEYS'
# format, one line, readable by its user only.
PAYLOAD_KEYS_FILE = "payload-keys"
LOCAL_KEY_ID = "local-1"


def local_payload_keys(settings: Settings) -> tuple[dict[str, str], str]:
    """The variables `loops up` gives its processes for payload encryption, and where the
    keys come from, for its summary. LOOPS_PAYLOAD_KEYS when set; else the data
    directory's keys, made once and kept: the local stack's Temporal history is encrypted
    from its first run, and stays readable across restarts. A ValueError when the file
    holds no valid keys (edited by hand, docs/operations.md#rotating-the-payload-key)."""
    if parse_payload_keys(settings.payload_keys):
        return {}, PAYLOAD_KEYS_VAR
    path = settings.data_dir / PAYLOAD_KEYS_FILE
    try:
        # Created exclusively and private: two `loops up` never make two keys, and no
        # other user of the machine reads it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as made:
            made.write(new_payload_key(LOCAL_KEY_ID) + "\n")
        log.info("made a payload key for this data directory: %s", path)
    text = path.read_text().strip()
    try:
        keys = parse_payload_keys(text)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if not keys:
        raise ValueError(
            f"{path} holds no key: it needs the keys this stack's runs were encrypted with,"
            " as id:base64key entries (docs/operations.md#rotating-the-payload-key)"
        )
    return {PAYLOAD_KEYS_VAR: text}, str(path)
