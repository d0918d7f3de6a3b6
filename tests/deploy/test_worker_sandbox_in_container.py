"""The compose worker's sandbox, in the /proc its container gets.

Docker masks paths of a container's /proc (/proc/kcore, /proc/keys, ... under /dev/null
or a tmpfs) and makes others read-only (/proc/sys, /proc/bus, ...), unless the service's
`security_opt` says `systempaths=unconfined`. The kernel refuses a fresh procfs in a new
user namespace while such over-mounts hide part of /proc, so bwrap's `--proc /proc` fails
and a worker that cannot sandbox refuses to start. There is no Docker engine here: this
rebuilds the /proc the compose file's options give (Docker's defaults, from moby's
oci/defaults.go) in a private mount namespace and runs the worker's own sandbox probe in
it as the image's user.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.deploy._support import REPO

pytestmark = pytest.mark.integration

# What Docker does to a container's /proc unless `systempaths=unconfined`.
MASKED_PROC = textwrap.dedent(
    """
    for f in /proc/kcore /proc/keys /proc/latency_stats /proc/timer_list /proc/timer_stats \\
        /proc/sched_debug; do
      [ -f $f ] && mount --bind /dev/null $f
    done
    for d in /proc/acpi /proc/asound /proc/scsi; do
      [ -d $d ] && mount -t tmpfs -o ro tmpfs $d
    done
    for p in /proc/bus /proc/fs /proc/irq /proc/sys /proc/sysrq-trigger; do
      [ -e $p ] && mount --bind $p $p && mount -o remount,bind,ro $p
    done
    """
)
# The image's user (deploy/Dockerfile).
IMAGE_UID = 10001
PROBE = (
    "from loopworks.checks.bwrap import SandboxPolicy\n"
    "from loopworks.checks.sandbox import probe\n"
    "made = probe(SandboxPolicy())\n"
    "print('works' if made.works else 'refused: ' + made.reason)\n"
)


def _worker_options() -> list[str]:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return list(compose["services"]["worker"].get("security_opt", []))


@pytest.mark.skipif(os.geteuid() != 0, reason="rebuilding a container's /proc needs root")
def test_the_compose_worker_can_sandbox_in_its_container(tmp_path: Path) -> None:
    masked = "systempaths=unconfined" not in _worker_options()
    setup = (MASKED_PROC if masked else "") + "exec setpriv --reuid {uid} --regid {uid} \\\n"
    setup += '  --clear-groups "$@"\n'
    tmp_path.chmod(0o777)
    probed = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-ec",
            setup.format(uid=IMAGE_UID),
            "sh",
            sys.executable,
            "-c",
            PROBE,
        ],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert probed.stdout.strip() == "works", probed.stdout + probed.stderr
