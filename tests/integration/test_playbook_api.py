"""`/playbooks` over HTTP against a real dev server and worker: hand-curated deltas go
through `PlaybookWorkflow`, which commits each version on the origin's playbook branch,
and every read comes back from git.

One worker and one API process serve the whole module.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loopworks.checks.redaction import REDACTED
from loopworks.deploy.local import free_port
from loopworks.schemas.playbook import PLAYBOOK_BRANCH, PLAYBOOK_PATH, playbook_name
from tests.integration.stack import DevServer, Stack, git

pytestmark = pytest.mark.integration

# Where nothing listens: an origin git cannot reach.
UNREACHABLE_PORT = free_port()
# A credential in the service's environment, which a person may paste into a batch.
PASTED_TOKEN = "ghp_" + "Pq7" * 12


@pytest.fixture(scope="module")
def http(dev_server: DevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    root = tmp_path_factory.mktemp("playbook-stack")
    # The unreachable origin below is named by the operator, as an internal git server
    # on plain http would be (workspace/origin_policy.py).
    allowed = {
        "LOOPS_ALLOWED_SCHEMES": "https,ssh,file,http",
        "LOOPS_ALLOWED_ORIGINS": f"127.0.0.1:{UNREACHABLE_PORT}",
        "GITHUB_TOKEN": PASTED_TOKEN,
    }
    stack = Stack(server=dev_server, data_dir=root / "data", logs=root / "logs", extra_env=allowed)
    try:
        stack.start_worker()
        _, base_url = stack.start_api()
        with httpx.Client(base_url=base_url, timeout=60) as client:
            yield client
    finally:
        stack.stop_all()


def _add(batch_id: str, *contents: str) -> dict[str, Any]:
    deltas = [
        {"op": "ADD", "kind": "constraint", "section": "testing", "content": c} for c in contents
    ]
    return {"batch_id": batch_id, "source": "curator", "deltas": deltas}


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def test_curate_read_and_roll_back(http: httpx.Client, remote: Path) -> None:
    name = playbook_name(str(remote))
    first = _ok(
        http.post(
            f"/playbooks/{name}/deltas",
            params={"repo": str(remote)},
            json=_add("b-1", "run the tests with -x"),
        )
    )
    assert first["version"] == 1 and first["changed"] and first["commit"]
    # Once started, the playbook's origin is its workflow's: no repo needed.
    second = _ok(
        http.post(f"/playbooks/{name}/deltas", json=_add("b-2", "never edit the generated client"))
    )
    assert second["version"] == 2
    # The same batch again is applied once: its answer is the first's, less each delta's
    # outcome (a writer remembers a batch by its counts, docs/playbook.md).
    again = _ok(
        http.post(f"/playbooks/{name}/deltas", json=_add("b-2", "never edit the generated client"))
    )
    assert again == {**second, "outcomes": []} and again["results"] == second["results"]

    current = _ok(http.get(f"/playbooks/{name}"))
    assert current["version"] == 2
    assert [i["content"] for i in current["items"]] == [
        "run the tests with -x",
        "never edit the generated client",
    ]
    branch = f"refs/heads/{PLAYBOOK_BRANCH}"
    assert git("--git-dir", str(remote), "rev-parse", branch) == second["commit"]
    assert git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", branch) == PLAYBOOK_PATH

    versions = _ok(http.get(f"/playbooks/{name}/versions"))
    assert [(v["version"], v["batch_id"], v["items"]) for v in versions] == [
        (2, "b-2", 2),
        (1, "b-1", 1),
    ]
    one = _ok(http.get(f"/playbooks/{name}/versions/1"))
    assert [i["content"] for i in one["items"]] == ["run the tests with -x"]

    listed = _ok(http.get("/playbooks"))
    mine = [s for s in listed if s["name"] == name]
    assert mine == [
        {"name": name, "origin": str(remote), "version": 2, "items": 2, "batches_applied": 2}
    ]

    rolled = _ok(http.post(f"/playbooks/{name}/rollback", json={"version": 1}))
    assert rolled["version"] == 3 and rolled["changed"]
    three = _ok(http.get(f"/playbooks/{name}"))
    assert three["version"] == 3
    assert [i["content"] for i in three["items"]] == [i["content"] for i in one["items"]]
    assert _ok(http.get(f"/playbooks/{name}/versions"))[0]["version"] == 3

    # Versions that do not exist.
    missing = http.get(f"/playbooks/{name}/versions/9")
    assert missing.status_code == 404 and "no version 9" in missing.json()["detail"]
    too_far = http.post(f"/playbooks/{name}/rollback", json={"version": 9})
    assert too_far.status_code == 422 and "versions 1 to 3" in too_far.json()["message"]
    assert http.post(f"/playbooks/{name}/rollback", json={"version": 0}).status_code == 422
    bad = http.post(
        f"/playbooks/{name}/deltas",
        json={"batch_id": "b-3", "source": "x", "deltas": [{"op": "NOPE"}]},
    )
    assert bad.status_code == 422


def test_unknown_playbooks_are_404(http: httpx.Client, remote: Path) -> None:
    for path in [
        "/playbooks/nobody-00000000",
        "/playbooks/nobody-00000000/versions",
        "/playbooks/nobody-00000000/versions/1",
        "/playbooks/Not%20A%20Name",
    ]:
        response = http.get(path)
        assert response.status_code == 404, (path, response.text)
        assert "not found" in response.json()["detail"]
    rollback = http.post("/playbooks/nobody-00000000/rollback", json={"version": 1})
    assert rollback.status_code == 404
    # Deltas for a playbook never started need its origin, and one whose name it is.
    unstarted = http.post("/playbooks/nobody-00000000/deltas", json=_add("b-1", "x"))
    assert unstarted.status_code == 404 and "?repo=" in unstarted.json()["detail"]
    wrong = http.post(
        "/playbooks/nobody-00000000/deltas", params={"repo": str(remote)}, json=_add("b-1", "x")
    )
    assert wrong.status_code == 422 and playbook_name(str(remote)) in wrong.json()["message"]


def test_a_writer_that_refuses_says_why(http: httpx.Client, remote: Path) -> None:
    """Someone moved the playbook branch behind the writer's back: no retry fixes that,
    so the change is a 409 that names the branch and what it found there (not only that
    an activity failed)."""
    name = playbook_name(str(remote))
    _ok(http.post(f"/playbooks/{name}/deltas", params={"repo": str(remote)}, json=_add("b-1", "x")))
    branch = f"refs/heads/{PLAYBOOK_BRANCH}"
    git("--git-dir", str(remote), "update-ref", branch, "refs/heads/main")

    refused = http.post(f"/playbooks/{name}/deltas", json=_add("b-2", "y"))
    assert refused.status_code == 409, refused.text
    detail = refused.json()["detail"]
    assert "writer refused" in detail and "a commit without a version" in detail, detail


def test_an_origin_git_cannot_reach_is_a_502_naming_the_git_failure(http: httpx.Client) -> None:
    """The writer's git activity retries (about 15 s), then the change fails with what
    git said, as a 502: the origin is at fault, not the request."""
    url = f"http://127.0.0.1:{UNREACHABLE_PORT}/nobody.git"  # nothing listens there
    name = playbook_name(url)
    failed = http.post(f"/playbooks/{name}/deltas", params={"repo": url}, json=_add("b-1", "x"))
    assert failed.status_code == 502, failed.text
    detail = failed.json()["detail"]
    assert f"playbook {name}'s writer failed on its origin" in detail, detail
    assert "127.0.0.1" in detail and "Activity task failed" not in detail, detail
    # The writer lives on (the origin may come back). Its own first read failed about
    # when the batch's did; before, that failed the workflow, and the list lost it.
    time.sleep(3)
    assert name in [p["name"] for p in _ok(http.get("/playbooks"))]


def test_a_bad_repo_parameter_is_named_as_the_query_parameter(http: httpx.Client) -> None:
    missing = str(Path(tempfile.gettempdir()).resolve() / "no" / "such" / "dir")  # a local root
    response = http.post(
        "/playbooks/nobody-00000000/deltas", params={"repo": missing}, json=_add("b", "x")
    )
    assert response.status_code == 422
    assert response.json()["message"] == f"query.repo: no such directory: {missing}"


def test_a_secret_pasted_into_a_batch_reaches_neither_the_branch_nor_a_prompt(
    http: httpx.Client, remote: Path
) -> None:
    """The writer commits a person's batch to the repository's playbook branch, and later
    runs' prompts quote its items: it was committed as written."""
    name = playbook_name(str(remote))
    pasted = f"push with the deploy token {PASTED_TOKEN}"
    _ok(
        http.post(
            f"/playbooks/{name}/deltas", params={"repo": str(remote)}, json=_add("p-1", pasted)
        )
    )

    [item] = _ok(http.get(f"/playbooks/{name}"))["items"]
    assert PASTED_TOKEN not in item["content"] and REDACTED in item["content"]
    committed = git(f"--git-dir={remote}", "show", f"{PLAYBOOK_BRANCH}:{PLAYBOOK_PATH}")
    assert PASTED_TOKEN not in committed
