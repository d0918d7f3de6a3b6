"""Property-based: nothing a client sends makes the API answer 5xx.

Schemathesis generates requests from the API's own OpenAPI schema (valid and invalid
bodies, odd ids, chained calls that start runs and then steer them) against the real
API, worker and dev server.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from loopworks.deploy.binaries import find_binary
from loopworks.schemas.payload_keys import new_payload_key
from tests.integration.stack import FUZZ_NAMESPACE, Stack

pytestmark = pytest.mark.integration


def test_no_request_makes_the_api_answer_a_server_error(stack: Stack, tmp_path: Path) -> None:
    # Runs other tests leave behind (their workers gone) are not this API's to answer for.
    stack.namespace = FUZZ_NAMESPACE
    # Encrypted, as a deployment with keys runs: the codec routes decode what they are sent.
    stack.extra_env["LOOPS_PAYLOAD_KEYS"] = new_payload_key("fuzz")
    stack.start_worker()
    _, base_url = stack.start_api()
    done = subprocess.run(
        [
            find_binary("schemathesis"),
            "run",
            f"{base_url}/openapi.json",
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "15",
            "--seed",
            "20261122",
        ],
        # Schemathesis keeps its own files in the working directory: not the repo.
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert "passed" in done.stdout
