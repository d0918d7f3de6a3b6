"""A worker checks its namespace's search attributes before it polls.

Every search attribute the workflows write (`workflows/search_attributes.py`) must be
known to the namespace first: one it lacks fails every workflow task that upserts it with
`BadSearchAttributes`, again and again, while the worker looks healthy. So at start the
worker adds the missing ones where the server lets it (the dev server, a self-hosted
server whose operator API it may use) and otherwise refuses to start, naming them and the
commands that add them. The comparison and the message are plain functions
(`compare`, `refusal`); `ensure_search_attributes` is the part that talks to Temporal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.service import RPCError

from loopworks.workflows.search_attributes import TYPE_NAMES, required_types

log = logging.getLogger(__name__)

# By the CLI's type name: the SDK's SearchAttributeIndexedValueType numbers its members
# as the API's enum does.
_INDEXED_TYPE = {name: IndexedValueType.ValueType(kind.value) for kind, name in TYPE_NAMES.items()}


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


def refusal(comparison: Comparison, namespace: str, address: str, reason: str = "") -> str:
    """Why the worker does not start, and what to run so that it does (one paragraph)."""
    parts: list[str] = []
    if comparison.missing:
        named = ", ".join(f"{name} ({kind})" for name, kind in comparison.missing.items())
        cannot = f" and this worker cannot add them ({reason})" if reason else ""
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


async def ensure_search_attributes(client: Client, namespace: str, address: str) -> str | None:
    """Add whichever required attributes the namespace lacks; None when it has them all
    now, else why the worker must not start. A server that will not list them (no
    permission) is not checked: the worker says so and starts."""
    try:
        present = await present_attributes(client, namespace)
    except RPCError as err:
        log.warning(
            "cannot list the search attributes of namespace %s (%s): not checked; the"
            " workflows need %s",
            namespace,
            err.message,
            ", ".join(required_types()),
        )
        return None
    comparison = compare(required_types(), present)
    if comparison.complete:
        return None
    if comparison.mistyped:
        return refusal(comparison, namespace, address)
    try:
        await add_attributes(client, namespace, comparison.missing)
    except RPCError as err:
        # PERMISSION_DENIED where the operator API is closed to workers, UNIMPLEMENTED on
        # Temporal Cloud, FAILED_PRECONDITION or INVALID_ARGUMENT where the server has no
        # room for another attribute of a type.
        reason = err.message or err.status.name
        return refusal(comparison, namespace, address, reason)
    log.info(
        "registered search attributes on namespace %s: %s",
        namespace,
        ", ".join(comparison.missing),
    )
    return None
