"""The gc's git on a repository it did not create, one that names a program everywhere git
would run one (tests/security/hostile_origin.py): surveying it, reading its branches'
times, pinning, unpinning and deleting a run's refs run none of its programs, over a path
and a file:// URL alike."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopworks.schemas.steps import HISTORY_PATH
from loopworks.workspace.git import GitWorkspaces
from loopworks.workspace.pruning import RunRecords
from loopworks.workspace.refs import work_ref
from tests.integration.stack import git
from tests.security.hostile_origin import HostileOrigin, hostile_origin
from tests.security.test_origin_programs import FORMS, assert_started_hardened

pytestmark = pytest.mark.integration

WHEN = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def origin(tmp_path: Path) -> HostileOrigin:
    return hostile_origin(tmp_path / "hostile")


@pytest.mark.parametrize("form", FORMS)
def test_the_gc_runs_none_of_the_origins_programs(
    tmp_path: Path, origin: HostileOrigin, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = str(origin.path) if form == "path" else origin.path.as_uri()
    ws = GitWorkspaces(tmp_path / "data", "loopworks-test", "loops@example.com")
    _, base = ws.resolve_base(repo, None)
    workdir = ws.checkout("run-1", repo, base)
    (workdir / "artifact.md").write_text("draft\n")
    (workdir / HISTORY_PATH).parent.mkdir(exist_ok=True)
    (workdir / HISTORY_PATH).write_text("{}\n")
    sha = ws.commit(workdir, "produce: draft", WHEN)
    ws.publish(workdir, "run-1", sha)
    ws.push_branch(workdir, "loops/run-1", sha, "run-1")
    ws.record_call(repo, "run-1", "00-hydrate-001", "{}\n", WHEN)
    origin.forget()  # what the run's own pushes did is tested elsewhere
    trace = tmp_path / "git-trace"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    records = RunRecords.of(ws)

    survey = records.survey(repo)
    assert survey.work_refs == {"run-1": work_ref("run-1")}
    assert records.branch_times(repo, ["refs/heads/loops/run-1"]) == {
        "refs/heads/loops/run-1": WHEN
    }
    records.pin(repo, "run-1", "alice", WHEN)
    assert records.unpin(repo, "run-1")
    records.delete_refs(repo, [*survey.call_refs["run-1"], work_ref("run-1")])

    assert origin.ran() == []
    left = git("for-each-ref", "--format=%(refname)", "refs/loopworks/", cwd=origin.path)
    assert left == ""
    assert_started_hardened(trace, "receive-pack")
