"""`/docs`: the interactive API docs, Swagger UI served from a package rather than a CDN,
so they render on a machine without the internet (FastAPI's own way to self-host them).

Only the files the page loads are served, each from a fixed path in the package
swagger-ui-bundle-v2 ships: no path a request names reaches the file system. Like
health, the docs need no token.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response
from swagger_ui_bundle import swagger_ui_path

router = APIRouter(include_in_schema=False)

ASSETS_PATH = "/docs/assets"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url,
        title=f"{request.app.title} API",
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
    )


@router.get(f"{ASSETS_PATH}/{{name}}")
async def swagger_ui_asset(name: str) -> Response:
    if name not in ASSETS:
        return Response(status_code=404)
    return FileResponse(
        Path(str(swagger_ui_path)) / name,
        media_type=ASSETS[name],
        headers={"Cache-Control": "public, max-age=86400"},
    )
