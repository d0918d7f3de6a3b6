"""The ledger is the orchestrator's alone (docs/graphs.md#the-merge-queue), on real
repositories: the merge queue refuses a task branch that changed the graph's ledger or task
files, saying why, and the ledger the graph records is exactly its own lines."""

from __future__ import annotations

import pytest

from loopworks.schemas.integration import LedgerRequest
from loopworks.schemas.tasks import (
    LEDGER_PATH,
    LedgerLine,
    TaskStatus,
    ledger_lines,
    ledger_sha256,
    task_file,
)
from tests.integration.stack import git
from tests.integration.test_merge_queue import BRANCH, GRAPH, WHEN, Repo, line, task
from tests.integration.test_merge_queue import repo as repo  # the fixture

pytestmark = pytest.mark.integration

# A line in the ledger's own format, word for word the example the format was given with:
# what a producer that knows the format would append.
FORGED = (
    '{"id": "T-001", "status": "completed", "updated_at": "2026-02-07T15:30:00Z", "summary": '
    '"Successfully initialized PB client", "delta": {"files_added": ["app/src/lib/pb.js"]}}'
)


async def record(repo: Repo, lines: list[LedgerLine], before: list[LedgerLine]) -> str:
    """Record `lines` as the graph does, after the lines it recorded `before`."""
    out = await repo.acts.record_ledger(
        LedgerRequest(
            origin=repo.origin,
            integration_branch=BRANCH,
            lines=lines,
            start=len(before),
            start_sha256=ledger_sha256(before),
            tasks=[task("T-001"), task("T-002")],
            committed_at=WHEN,
        )
    )
    return out.commit


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        # Appended where no other line goes: it would land unseen.
        (lambda ledger: {LEDGER_PATH: ledger + FORGED + "\n"}, LEDGER_PATH),
        (lambda ledger: {task_file("T-009"): '{"id": "T-009"}\n'}, task_file("T-009")),
        (lambda ledger: {task_file("T-002"): "{}\n"}, task_file("T-002")),
        (lambda ledger: {"docs/tasks/T-001/artifact.md": "# mine"}, "docs/tasks/T-001/artifact.md"),
    ],
)
async def test_a_task_branch_that_changes_the_graphs_record_is_refused_saying_why(
    repo: Repo, changes, named: str
) -> None:
    await repo.prepare()
    head = await record(repo, [line("T-001", TaskStatus.PENDING)], [])
    ledger = repo.show(head, LEDGER_PATH)
    branch = repo.child(f"{GRAPH}/T-001/1", head, {"src/new.txt": "n\n", **changes(ledger)}, "1")

    outcome = await repo.merge(task("T-001"), branch)

    assert not outcome.merged and outcome.reason == "orchestrator_files"
    assert outcome.commit == head == repo.head()  # nothing merged, nothing pushed
    assert f"{branch} changes `{named}`" in outcome.output_tail
    assert "written only by the graph's orchestrator" in outcome.output_tail
    assert "Leave them as they are (restore any you changed)" in outcome.output_tail
    assert repo.show(head, LEDGER_PATH) == ledger
    # Its retry, leaving the record alone, merges, though the ledger moved on meanwhile:
    # the rule is about the branch's own changes.
    await record(
        repo, [line("T-001", TaskStatus.IN_PROGRESS, 1)], [line("T-001", TaskStatus.PENDING)]
    )
    again = repo.child(f"{GRAPH}/T-001/2", head, {"src/new.txt": "n\n"}, "1")
    assert (await repo.merge(task("T-001"), again, attempt=2)).merged


async def test_a_branch_deleting_a_task_file_is_refused_too(repo: Repo) -> None:
    await repo.prepare()
    head = await record(repo, [line("T-001", TaskStatus.PENDING)], [])
    work = repo.tmp / "deleter"
    git("clone", "--quiet", repo.origin, str(work))
    git("checkout", "--quiet", "--detach", head, cwd=work)
    git("rm", "--quiet", task_file("T-002"), cwd=work)
    git("commit", "--quiet", "-m", "tidy", cwd=work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/loops/deleter", cwd=work)

    outcome = await repo.merge(task("T-001"), "loops/deleter")

    assert outcome.reason == "orchestrator_files" and task_file("T-002") in outcome.output_tail


async def test_the_ledger_is_exactly_the_graphs_lines_whatever_the_base_branch_held(
    repo: Repo,
) -> None:
    """A base branch with a ledger of its own (an earlier graph's, merged) starts no graph
    with lines that are not its; a retried record writes the same file."""
    seeded = repo.tmp / "earlier"
    git("clone", "--quiet", repo.origin, str(seeded))
    (seeded / "docs" / "current").mkdir(parents=True)
    (seeded / LEDGER_PATH).write_text(FORGED + "\n")
    git("add", "-A", cwd=seeded)
    git("commit", "--quiet", "-m", "an earlier graph", cwd=seeded)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=seeded)
    await repo.prepare()
    ours = [line("T-001", TaskStatus.PENDING), line("T-002", TaskStatus.PENDING)]

    first = await record(repo, ours, [])
    assert ledger_lines(repo.show(first, LEDGER_PATH)) == ours
    assert await record(repo, ours, []) == first  # retried: the same, nothing new

    more = [line("T-001", TaskStatus.IN_PROGRESS, 1)]
    after = await record(repo, more, ours)
    assert ledger_lines(repo.show(after, LEDGER_PATH)) == ours + more
    # Byte for byte (the helper strips the last newline).
    assert repo.show(after, LEDGER_PATH) == "\n".join(x.to_jsonl() for x in ours + more)


def push_to_the_ledger(repo: Repo, name: str, text: str, before: bool = False) -> None:
    """Someone else's line on the integration branch's ledger: after its lines, or before."""
    work = repo.tmp / name
    git("clone", "--quiet", "--branch", BRANCH, repo.origin, str(work))
    held = (work / LEDGER_PATH).read_text()
    (work / LEDGER_PATH).write_text(text + held if before else held + text)
    git("commit", "--quiet", "-am", "forged", cwd=work)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{BRANCH}", cwd=work)


async def test_a_line_the_graph_did_not_write_is_dropped_and_none_of_its_own_lost(
    repo: Repo,
) -> None:
    """A line pushed after the graph's is gone at its next record. One before them (a ledger
    written when the merge queue still let such branches in) cannot be told from the
    graph's: the graph's next lines are then appended, and none of its lines dropped."""
    await repo.prepare()
    ours = [line(f"T-00{n}", TaskStatus.PENDING) for n in (1, 2, 3)]
    await record(repo, ours[:1], [])
    push_to_the_ledger(repo, "after", FORGED + "\n")

    second = await record(repo, ours[1:2], ours[:1])
    assert ledger_lines(repo.show(second, LEDGER_PATH)) == ours[:2]

    push_to_the_ledger(repo, "before", FORGED + "\n", before=True)
    third = await record(repo, ours[2:], ours[:2])
    texts = repo.show(third, LEDGER_PATH).splitlines()
    assert texts == [FORGED, *(x.to_jsonl() for x in ours)]
