"""Liveness (the process is up) and readiness (Temporal answers)."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

from loopworks.api.deps import ConnectionDep, SettingsDep
from loopworks.api.errors import TemporalUnavailable

router = APIRouter(tags=["health"])

READY_TIMEOUT = timedelta(seconds=3)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "Temporal is unreachable"}})
async def readyz(connection: ConnectionDep, settings: SettingsDep) -> JSONResponse:
    # Describing our namespace proves both the connection and that runs can be started.
    try:
        client = await connection.client()
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=settings.temporal_namespace),
            timeout=READY_TIMEOUT,
        )
    except Exception as err:  # any failure here means "not ready", never a 500
        detail = err.message if isinstance(err, TemporalUnavailable) else str(err)
        return JSONResponse(
            status_code=503, content={"status": "unavailable", "detail": detail or "error"}
        )
    return JSONResponse({"status": "ok", "temporal": settings.temporal_address})
