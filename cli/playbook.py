"""`loops playbook ...`: list playbooks, show a version, its history, what changed between
two versions, and roll back.

The same shape as `graphs`: one function per command, calling the API (`/playbooks`)
through `ApiClient`, parsing its answers with the shared schemas (`Playbook`,
`PlaybookVersion`, `PlaybookState`, `AppliedBatch`). The parser of its commands lives here
too, so `__main__` only hooks it in.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import quote

from pydantic import TypeAdapter
from rich.table import Table
from rich.text import Text

from loopworks.cli.client import ApiClient, parse
from loopworks.cli.commands import Context, print_listing
from loopworks.cli.render import timestamp
from loopworks.schemas.playbook import (
    AppliedBatch,
    Playbook,
    PlaybookItem,
    PlaybookState,
    PlaybookVersion,
)

PLAYBOOK: TypeAdapter[Playbook] = TypeAdapter(Playbook)
STATES: TypeAdapter[list[PlaybookState]] = TypeAdapter(list[PlaybookState])
VERSIONS: TypeAdapter[list[PlaybookVersion]] = TypeAdapter(list[PlaybookVersion])
APPLIED: TypeAdapter[AppliedBatch] = TypeAdapter(AppliedBatch)
# What `diff` compares of an item that is in both versions (its id and when it changed
# are bookkeeping, not content).
COMPARED = ("kind", "section", "content", "helpful", "harmful", "neutral")
SHORT_SHA = 10


def playbook_path(name: str, *rest: str) -> str:
    return "/".join(["/playbooks", quote(name, safe=""), *rest])


class PlaybookApi:
    """The `/playbooks` routes, answered as the shared schemas."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def listed(self) -> list[PlaybookState]:
        return parse(STATES, self.client.json("GET", "/playbooks"), "the list of playbooks")

    def playbook(self, name: str, version: int | None = None) -> Playbook:
        """The current version, or version `version`."""
        path = (
            playbook_path(name)
            if version is None
            else playbook_path(name, "versions", str(version))
        )
        return parse(PLAYBOOK, self.client.json("GET", path), f"playbook {name}")

    def versions(self, name: str) -> list[PlaybookVersion]:
        answer = self.client.json("GET", playbook_path(name, "versions"))
        return parse(VERSIONS, answer, f"the versions of playbook {name}")

    def rollback(self, name: str, version: int) -> AppliedBatch:
        body = {"version": version}
        answer = self.client.json("POST", playbook_path(name, "rollback"), body=body)
        return parse(APPLIED, answer, f"rollback of playbook {name}")


# --- diff -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    before: PlaybookItem
    after: PlaybookItem

    @property
    def fields(self) -> list[str]:
        return [f for f in COMPARED if getattr(self.before, f) != getattr(self.after, f)]


@dataclass(frozen=True)
class PlaybookDiff:
    added: list[PlaybookItem] = field(default_factory=list)
    removed: list[PlaybookItem] = field(default_factory=list)
    changed: list[Change] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def diff(old: Playbook, new: Playbook) -> PlaybookDiff:
    """Items by id: in `new` only, in `old` only, and in both with other content or counts."""
    before = {item.id: item for item in old.items}
    after = {item.id: item for item in new.items}
    pairs = (Change(before[i.id], i) for i in new.items if i.id in before)
    return PlaybookDiff(
        added=[item for item in new.items if item.id not in before],
        removed=[item for item in old.items if item.id not in after],
        changed=[change for change in pairs if change.fields],
    )


# --- rendering ------------------------------------------------------------------------


def _table(*columns: str) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in columns:
        table.add_column(name, overflow="fold")
    return table


def counts(item: PlaybookItem) -> str:
    return f"+{item.helpful} -{item.harmful}"


def playbook_view(playbook: Playbook) -> list[Text | Table]:
    """A heading, then one table per section (in the order sections first appear)."""
    size = f"{len(playbook.items)} item{'' if len(playbook.items) == 1 else 's'}"
    parts: list[Text | Table] = [Text(f"playbook {playbook.name} v{playbook.version} ({size})")]
    sections: dict[str, list[PlaybookItem]] = {}
    for item in playbook.items:
        sections.setdefault(item.section, []).append(item)
    for section, items in sections.items():
        parts.append(Text(f"\n{section}", style="bold"))
        table = _table("ID", "KIND", "USES", "CONTENT")
        for item in items:
            table.add_row(
                Text(item.id), Text(item.kind.value), Text(counts(item)), Text(item.content)
            )
        parts.append(table)
    return parts


def states_table(states: Iterable[PlaybookState]) -> Table:
    table = _table("NAME", "VERSION", "ITEMS", "ORIGIN")
    for state in states:
        table.add_row(
            Text(state.name), Text(f"v{state.version}"), Text(str(state.items)), Text(state.origin)
        )
    return table


def versions_table(versions: Iterable[PlaybookVersion]) -> Table:
    table = _table("VERSION", "COMMITTED", "ITEMS", "BATCH", "SOURCE", "COMMIT")
    for v in versions:
        table.add_row(
            Text(f"v{v.version}"),
            Text(timestamp(v.committed_at)),
            Text("-" if v.items is None else str(v.items)),
            Text(v.batch_id or "-"),
            Text(v.source or "-"),
            Text(v.commit[:SHORT_SHA]),
        )
    return table


def diff_lines(changes: PlaybookDiff) -> list[Text]:
    lines: list[Text] = []
    for item in changes.added:
        lines.append(Text(f"+ {item.id} [{item.section}] {item.content}", style="green"))
    for item in changes.removed:
        lines.append(Text(f"- {item.id} [{item.section}] {item.content}", style="red"))
    for change in changes.changed:
        lines.append(Text(f"~ {change.after.id} [{change.after.section}]", style="yellow"))
        for name in change.fields:
            old, new = getattr(change.before, name), getattr(change.after, name)
            lines.append(Text(f"    {name}: {old} -> {new}"))
    return lines


# --- commands -------------------------------------------------------------------------


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    states = PlaybookApi(ctx.client).listed()
    return print_listing(ctx, states, args.json, STATES, states_table, "no playbooks yet")


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    playbook = PlaybookApi(ctx.client).playbook(args.name, args.version)
    if args.json:
        ctx.print(playbook.model_dump_json(indent=2))
        return 0
    for part in playbook_view(playbook):
        ctx.console.print(part)
    return 0


def cmd_history(ctx: Context, args: argparse.Namespace) -> int:
    versions = PlaybookApi(ctx.client).versions(args.name)
    empty = f"playbook {args.name} has no versions yet"
    return print_listing(ctx, versions, args.json, VERSIONS, versions_table, empty)


def cmd_diff(ctx: Context, args: argparse.Namespace) -> int:
    api = PlaybookApi(ctx.client)
    old = api.playbook(args.name, args.a)
    new = api.playbook(args.name, args.b)
    changes = diff(old, new)
    ctx.console.print(Text(f"playbook {args.name}: v{old.version} -> v{new.version}"))
    if changes.empty:
        ctx.print("no changes")
    for line in diff_lines(changes):
        ctx.console.print(line)
    return 0


def cmd_rollback(ctx: Context, args: argparse.Namespace) -> int:
    applied = PlaybookApi(ctx.client).rollback(args.name, args.version)
    commit = f" (commit {applied.commit[:SHORT_SHA]})" if applied.commit else ""
    if applied.changed:
        ctx.print(f"playbook {args.name} v{applied.version} holds v{args.version}'s items{commit}")
    else:
        ctx.print(f"playbook {args.name} v{applied.version} already holds v{args.version}'s items")
    return 0


# --- the parser -----------------------------------------------------------------------

Command = Callable[[Context, argparse.Namespace], int]


def _version(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("versions start at 1")
    return value


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """`loops playbook <command>`: the delta playbook commands, a parser of their own."""
    playbook = sub.add_parser(
        "playbook",
        help="read, compare and roll back delta playbooks",
        description="Delta playbooks: short items runs learn from runs, one playbook per "
        "repository, every version a commit on its origin's loops/playbook branch.",
    )
    playbook_sub = playbook.add_subparsers(
        dest="playbook_command", metavar="COMMAND", required=True
    )

    def add(name: str, handler: Command, help_text: str) -> argparse.ArgumentParser:
        command = playbook_sub.add_parser(
            name, parents=[common], help=help_text, description=help_text
        )
        command.set_defaults(handler=handler)
        return command

    listing = add("list", cmd_list, "list playbooks: name, version, items, origin")
    listing.add_argument("--json", action="store_true")

    show = add("show", cmd_show, "a playbook's items by section (the current version)")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--version", type=_version, help="show this version instead")
    show.add_argument("--json", action="store_true", help="print the playbook as JSON")

    history = add("history", cmd_history, "a playbook's versions, newest first")
    history.add_argument("name", metavar="NAME")
    history.add_argument("--json", action="store_true")

    compare = add("diff", cmd_diff, "items added, removed and changed from version A to B")
    compare.add_argument("name", metavar="NAME")
    compare.add_argument("a", metavar="A", type=_version, help="the older version")
    compare.add_argument("b", metavar="B", type=_version, nargs="?", help="default: the current")

    rollback = add(
        "rollback", cmd_rollback, "make a version's items current again, as a new version"
    )
    rollback.add_argument("name", metavar="NAME")
    rollback.add_argument("version", metavar="VERSION", type=_version)
