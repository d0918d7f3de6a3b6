"""Register loopworks' search attributes on a Temporal namespace (idempotent): for the
test servers and the benchmark, which start workers without `python -m loopworks.worker`'s
own check (service/search_attributes.py)."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from loopworks.service.search_attributes import (
    add_attributes,
    compare,
    present_attributes,
    required_types,
)
from loopworks.workflows.search_attributes import REQUIRED


async def register_search_attributes(client: Client, namespace: str) -> list[str]:
    """Add whichever of the workflows' search attributes the namespace lacks; return them."""
    try:
        present = await present_attributes(client, namespace)
    except RPCError as err:
        # The time-skipping test server can add search attributes but not list them.
        if err.status != RPCStatusCode.UNIMPLEMENTED:
            raise
        present = {}
    missing = compare(required_types(REQUIRED), present).missing
    if missing:
        await add_attributes(client, namespace, missing)
    return sorted(missing)
