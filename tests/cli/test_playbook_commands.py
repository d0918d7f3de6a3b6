"""`loops playbook ...` against a fake API whose answers are built from the shared schemas
(`Playbook`, `PlaybookVersion`, `PlaybookState`, `AppliedBatch`): each command's requests
and its output off a terminal, and `diff`'s comparison on its own."""

from __future__ import annotations

import io
import json

import httpx
import pytest

from loopworks.cli import commands
from loopworks.cli.app import build_parser, main
from loopworks.cli.client import ApiClient, ApiError
from loopworks.cli.config import CliConfig
from loopworks.cli.playbook import diff
from loopworks.schemas.playbook import (
    AppliedBatch,
    ItemKind,
    Playbook,
    PlaybookItem,
    PlaybookState,
    PlaybookVersion,
)
from tests.cli.sample import wire_list
from tests.cli.test_graph_commands import FakeApi, json_of

pytestmark = pytest.mark.unit

NAME = "app-1234abcd"
BASE = f"/playbooks/{NAME}"


def item(n: int, section: str, content: str, version: int = 1, **counts: int) -> PlaybookItem:
    return PlaybookItem(
        id=f"pb-{version}-{n}",
        kind=ItemKind.CONSTRAINT if section == "testing" else ItemKind.SKILL,
        section=section,
        content=content,
        created_in=version,
        updated_in=version,
        **counts,
    )


V1 = Playbook(
    name=NAME,
    version=1,
    items=[
        item(1, "testing", "run pytest with -x"),
        item(2, "style", "keep [brackets] as they are"),
        item(3, "testing", "never call the network"),
    ],
)
V3 = Playbook(
    name=NAME,
    version=3,
    items=[
        V1.items[0].model_copy(update={"helpful": 2, "updated_in": 3}),
        V1.items[1],
        item(1, "testing", "use the fixtures in conftest", version=3),
    ],
)
VERSIONS = [
    PlaybookVersion(
        version=v,
        commit=f"{v}" * 40,
        batch_id=f"batch-{v}",
        source="run-1",
        committed_at=f"2026-05-0{v}T12:00:00+00:00",
        items=3,
    )
    for v in (3, 2, 1)
]


def run(argv: list[str], api: FakeApi) -> tuple[int, str]:
    args = build_parser().parse_args(["playbook", *argv])
    config = CliConfig("http://api.test", None)
    out = io.StringIO()
    client = ApiClient(config, transport=httpx.MockTransport(api))
    code = args.handler(commands.Context(config, client, out=out), args)
    return code, out.getvalue()


def test_list_prints_each_playbook() -> None:
    state = PlaybookState(name=NAME, origin="/srv/app.git", version=3, items=3, batches_applied=4)
    api = FakeApi({("GET", "/playbooks"): httpx.Response(200, json=wire_list([state]))})
    code, out = run(["list"], api)
    assert code == 0 and api.calls() == [("GET", "/playbooks")]
    assert "NAME" in out and NAME in out and "v3" in out and "/srv/app.git" in out
    code, out = run(["list", "--json"], api)
    assert json.loads(out) == wire_list([state])


def test_list_without_playbooks() -> None:
    api = FakeApi({("GET", "/playbooks"): httpx.Response(200, json=[])})
    assert run(["list"], api) == (0, "no playbooks yet\n")


def test_show_groups_items_by_section() -> None:
    api = FakeApi({("GET", BASE): json_of(V3)})
    code, out = run(["show", NAME], api)
    assert code == 0 and api.calls() == [("GET", BASE)]
    lines = out.splitlines()
    assert lines[0] == f"playbook {NAME} v3 (3 items)"
    testing, style = lines.index("testing"), lines.index("style")
    assert testing < style
    section_of_new = next(i for i, line in enumerate(lines) if "pb-3-1" in line)
    assert testing < section_of_new < style
    row = next(line for line in lines if "pb-1-1" in line)
    assert "constraint" in row and "+2 -0" in row and "run pytest with -x" in row
    # Content is printed as it is, never read as markup.
    assert "keep [brackets] as they are" in out


def test_show_a_version_as_json() -> None:
    api = FakeApi({("GET", f"{BASE}/versions/1"): json_of(V1)})
    code, out = run(["show", NAME, "--version", "1", "--json"], api)
    assert code == 0 and api.calls() == [("GET", f"{BASE}/versions/1")]
    assert Playbook.model_validate_json(out) == V1


def test_history_lists_versions_newest_first() -> None:
    api = FakeApi({("GET", f"{BASE}/versions"): httpx.Response(200, json=wire_list(VERSIONS))})
    code, out = run(["history", NAME], api)
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("v")]
    assert [row.split()[0] for row in rows] == ["v3", "v2", "v1"]
    assert "batch-3" in rows[0] and "3333333333" in rows[0] and "2026-05-03T12:00:00Z" in rows[0]


def test_diff_against_the_current_version() -> None:
    api = FakeApi({("GET", f"{BASE}/versions/1"): json_of(V1), ("GET", BASE): json_of(V3)})
    code, out = run(["diff", NAME, "1"], api)
    assert code == 0
    assert api.calls() == [("GET", f"{BASE}/versions/1"), ("GET", BASE)]
    assert out.splitlines() == [
        f"playbook {NAME}: v1 -> v3",
        "+ pb-3-1 [testing] use the fixtures in conftest",
        "- pb-1-3 [testing] never call the network",
        "~ pb-1-1 [testing]",
        "    helpful: 0 -> 2",
    ]


def test_diff_of_two_versions_and_of_equal_ones() -> None:
    api = FakeApi({("GET", f"{BASE}/versions/1"): json_of(V1)})
    code, out = run(["diff", NAME, "1", "1"], api)
    assert code == 0 and out.splitlines() == [f"playbook {NAME}: v1 -> v1", "no changes"]


def test_diff_compares_content_not_bookkeeping() -> None:
    moved = V1.items[0].model_copy(update={"updated_in": 2})
    edited = V1.items[1].model_copy(update={"content": "new words", "section": "docs"})
    changes = diff(V1, V1.model_copy(update={"items": [moved, edited, V1.items[2]]}))
    assert not changes.added and not changes.removed
    assert [(c.after.id, c.fields) for c in changes.changed] == [("pb-1-2", ["section", "content"])]


def test_rollback_posts_the_version() -> None:
    applied = AppliedBatch(batch_id="rollback:4:to:1", version=4, changed=True, commit="ab" * 20)
    api = FakeApi({("POST", f"{BASE}/rollback"): json_of(applied)})
    code, out = run(["rollback", NAME, "1"], api)
    assert code == 0 and api.body() == {"version": 1}
    assert out == f"playbook {NAME} v4 holds v1's items (commit ababababab)\n"


def test_the_apis_refusal_is_its_message() -> None:
    refused = httpx.Response(422, json={"detail": [], "message": "playbook x has versions 1 to 3"})
    api = FakeApi({("POST", f"{BASE}/rollback"): refused})
    with pytest.raises(ApiError, match="versions 1 to 3"):
        run(["rollback", NAME, "9"], api)


@pytest.mark.parametrize("argv", [["show", NAME, "--version", "0"], ["diff", NAME, "x"]])
def test_bad_versions_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["playbook", *argv])
    assert exit_info.value.code == 2
