"""The namespace's search attributes, checked by the worker before it polls and by the API
before it starts a run.

Every search attribute the workflows write (`workflows/search_attributes.py`) must be
known to the namespace first: one it lacks fails every workflow task that upserts it with
`BadSearchAttributes`, again and again, while the worker looks healthy, and a start that
sets one (`LoopStartedBy`) is refused with `invalid search attribute`. So each process,
once it reaches Temporal, adds the missing ones where the server lets it (the dev server,
a self-hosted server whose operator API it may use) and otherwise refuses, naming them and
the commands that add them: the worker does not start; the API is not ready
(docs/operations.md#search-attributes). The comparison and the message are plain
functions (`compare`, `refusal`); `ensure_search_attributes` is the part that talks to
Temporal. The keys are the workflows'; the callers pass them (`required_types(REQUIRED)`),
as this layer sits below the workflows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType, SearchAttributeKey
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger(__name__)

# A server that did not answer has not said whether it lists or adds attributes.
_NO_ANSWER = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)

# Each type as Temporal's CLI and the dev server's `--search-attribute Name=Type` spell it.
TYPE_NAMES: dict[SearchAttributeIndexedValueType, str] = {
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}
# By the CLI's type name: the SDK's SearchAttributeIndexedValueType numbers its members
# as the API's enum does.
_INDEXED_TYPE = {name: IndexedValueType.ValueType(kind.value) for kind, name in TYPE_NAMES.items()}


def required_types(keys: Iterable[SearchAttributeKey[Any]]) -> dict[str, str]:
    """Each key's name and type (`{"LoopStatus": "Keyword", ...}`)."""
    return {key.name: TYPE_NAMES[key.indexed_value_type] for key in keys}


@dataclass(frozen=True)
class Comparison:
    """The required attributes a namespace lacks, and those it has with another type
    (name -> (the workflows' type, the namespace's))."""

    missing: dict[str, str] = field(default_factory=dict)
    mistyped: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.missing and not self.mistyped


def compare(required: Mapping[str, str], present: Mapping[str, str]) -> Comparison:
    """What `present` (name -> type, as the namespace lists them) lacks of `required`."""
    missing = {name: kind for name, kind in required.items() if name not in present}
    mistyped = {
        name: (kind, present[name])
        for name, kind in required.items()
        if name in present and present[name] != kind
    }
    return Comparison(missing=missing, mistyped=mistyped)


def create_commands(missing: Mapping[str, str], namespace: str, address: str) -> list[str]:
    """The Temporal CLI commands that add `missing`, one per type (the CLI takes several
    names but one type)."""
    by_type: dict[str, list[str]] = {}
    for name, kind in missing.items():
        by_type.setdefault(kind, []).append(name)
    return [
        f"temporal operator search-attribute create --address {address}"
        f" --namespace {namespace} "
        + " ".join(f"--name {name}" for name in names)
        + f" --type {kind}"
        for kind, names in by_type.items()
    ]


def refusal(
    comparison: Comparison,
    namespace: str,
    address: str,
    reason: str = "",
    who: str = "this worker",
) -> str:
    """Why `who` does not go on, and what to run so that it does (one paragraph)."""
    parts: list[str] = []
    if comparison.missing:
        named = ", ".join(f"{name} ({kind})" for name, kind in comparison.missing.items())
        cannot = f" and {who} cannot add them ({reason})" if reason else ""
        commands = "".join(
            f"\n  {command}" for command in create_commands(comparison.missing, namespace, address)
        )
        parts.append(
            f"namespace {namespace} lacks search attributes the workflows write: {named}"
            f"{cannot}. Add them (on Temporal Cloud: with `tcld` or its UI) with:{commands}"
        )
    if comparison.mistyped:
        named = ", ".join(
            f"{name} is {found}, the workflows write {wanted}"
            for name, (wanted, found) in comparison.mistyped.items()
        )
        parts.append(
            f"namespace {namespace} has search attributes of the wrong type: {named}"
            " (a type cannot change: remove them, or use another namespace)"
        )
    return "\n".join(parts)


async def present_attributes(client: Client, namespace: str) -> dict[str, str]:
    """Every search attribute the namespace knows (system and custom), by name: type."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    present: dict[str, str] = {}
    for attributes in (listed.system_attributes, listed.custom_attributes):
        for name, value in attributes.items():
            kind = SearchAttributeIndexedValueType(value) if value else None
            present[name] = TYPE_NAMES[kind] if kind else "Unspecified"
    return present


async def add_attributes(client: Client, namespace: str, missing: Mapping[str, str]) -> None:
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=namespace,
            search_attributes={name: _INDEXED_TYPE[kind] for name, kind in missing.items()},
        )
    )


async def ensure_search_attributes(
    client: Client,
    namespace: str,
    address: str,
    required: Mapping[str, str],
    who: str = "this worker",
) -> str | None:
    """Add whichever of `required` (name: type) the namespace lacks; None when it has
    them all now, else why `who` must not go on. A server that will not list them (no
    permission) is not checked: the log says so, and None. RPCError when the server does
    not answer: ask again later."""
    try:
        present = await present_attributes(client, namespace)
    except RPCError as err:
        if err.status in _NO_ANSWER:
            raise
        log.warning(
            "cannot list the search attributes of namespace %s (%s): not checked; the"
            " workflows need %s",
            namespace,
            err.message,
            ", ".join(required),
        )
        return None
    comparison = compare(required, present)
    if comparison.complete:
        return None
    if comparison.mistyped:
        return refusal(comparison, namespace, address, who=who)
    try:
        await add_attributes(client, namespace, comparison.missing)
    except RPCError as err:
        if err.status in _NO_ANSWER:
            raise
        # PERMISSION_DENIED where the operator API is closed to this process, UNIMPLEMENTED
        # on Temporal Cloud, FAILED_PRECONDITION or INVALID_ARGUMENT where the server has
        # no room for another attribute of a type.
        reason = err.message or err.status.name
        return refusal(comparison, namespace, address, reason, who)
    log.info(
        "registered search attributes on namespace %s: %s",
        namespace,
        ", ".join(comparison.missing),
    )
    return None
