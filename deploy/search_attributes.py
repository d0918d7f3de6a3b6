"""Register loopworks' search attributes on a Temporal namespace (idempotent)."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.deploy.processes import SEARCH_ATTRIBUTES

_INDEXED_TYPE = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "Double": IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
    "Bool": IndexedValueType.INDEXED_VALUE_TYPE_BOOL,
}


async def register_search_attributes(client: Client, namespace: str) -> list[str]:
    """Add whichever of the loop's search attributes the namespace lacks; return them."""
    try:
        existing = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        known = set(existing.custom_attributes) | set(existing.system_attributes)
    except RPCError as err:
        # The time-skipping test server can add search attributes but not list them.
        if err.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        known = set()
    missing = {
        name: _INDEXED_TYPE[kind] for name, kind in SEARCH_ATTRIBUTES.items() if name not in known
    }
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
    return sorted(missing)
