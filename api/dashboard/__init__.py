"""The dashboard: the API's runs, graphs and playbooks as pages for a browser, under `/ui`
(docs/dashboard.md).

Rendered on the server from the package's templates, with what the JSON routes read;
charts and the task graph's DAG are SVG drawn here. The pages run one script of our own
(`static/dashboard.js`): live updates over the event streams and the actions, which it
sends to the JSON routes as any client does. Everything a model or a repository wrote is
text to the templates (autoescaped) and the artifact's markdown is rendered with raw HTML
off; a Content-Security-Policy lets the pages run no script but that one file.
"""

from __future__ import annotations

import inspect

from fastapi import FastAPI, Request, Response

from loopworks.api import redaction
from loopworks.api.dashboard import access, graphs, playbooks, render, runs
from loopworks.api.dashboard.states import RunStates
from loopworks.api.errors import ApiError
from loopworks.api.security import Caller
from loopworks.api.tokens import OPEN_ACCESS_NAME


def install(app: FastAPI) -> None:
    """Serve the dashboard from `app`: its pages, sign-in and static files. Install it
    after the API's error handlers: a page's error is a page, the JSON routes' stay JSON."""
    app.state.ui_run_states = RunStates()
    access.install(app)
    answer_json = app.exception_handlers[ApiError]

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        # A page is what a browser GETs; the sign-in's POST answers its script, in JSON.
        if not request.url.path.startswith("/ui/") or request.method not in ("GET", "HEAD"):
            answered = answer_json(request, exc)
            return await answered if inspect.isawaitable(answered) else answered
        caller = Caller(OPEN_ACCESS_NAME, read_only=True)
        # Redacted as the JSON errors are: a message may quote what was asked for.
        context = {"status_code": exc.status_code, "message": redaction.served(exc.message)}
        return render.page(request, "error.html", caller, context, exc.status_code)

    app.add_exception_handler(ApiError, api_error)
    app.include_router(access.router)
    app.include_router(runs.router)
    app.include_router(graphs.router)
    app.include_router(playbooks.router)
    app.include_router(render.static)
