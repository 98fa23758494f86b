"""The dashboard's Starlette app: the shell page, its static files, the live feed and the
pages' routes, all behind the guard (relay.web.security)."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from relay.web.dashboard import Dashboard
from relay.web.pages import Page
from relay.web.security import Guard

STATIC = Path(__file__).resolve().parent / "static"
NO_STORE = {"cache-control": "no-store"}


def json_error(message: str, status: int = 400) -> JSONResponse:
    """An action's or a route's refusal: `{"error": message}` with `status`."""
    return JSONResponse({"error": message}, status_code=status, headers=NO_STORE)


def json_answer(data: Any) -> Response:
    """`data` (anything msgspec encodes) as a JSON answer that is never cached."""
    import msgspec

    return Response(msgspec.json.encode(data), media_type="application/json", headers=NO_STORE)


async def read_json(request: Request) -> dict[str, Any] | JSONResponse:
    """An action's body: a JSON object, or the refusal that says what is wrong with it."""
    import json

    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return json_error("an action's body must be JSON (Content-Type: application/json)", 415)
    raw = await request.body()
    if len(raw) > 1_000_000:
        return json_error("an action's body is at most 1 MB", 413)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        return json_error(f"the body is not JSON: {exc}")
    if not isinstance(body, dict):
        return json_error("the body must be a JSON object")
    return body


def shell(dashboard: Dashboard, pages: Sequence[Page]) -> str:
    """The one HTML page: navigation, a section per page, the scripts; every text escaped."""
    text = (STATIC / "index.html").read_text(encoding="utf-8")
    nav = "\n".join(
        f'      <a href="#{html.escape(page.name)}" data-page="{html.escape(page.name)}">'
        f"{html.escape(page.title)}</a>"
        for page in pages
    )
    sections = "\n".join(
        f'    <section id="page-{html.escape(page.name)}" class="page" hidden></section>'
        for page in pages
    )
    styles = "\n".join(
        f'  <link rel="stylesheet" href="/static/{html.escape(page.style)}">'
        for page in pages
        if page.style
    )
    scripts = "\n".join(
        f'  <script defer src="/static/{html.escape(page.script)}"></script>'
        for page in pages
        if page.script
    )
    values = {
        "csrf": html.escape(dashboard.csrf),
        "team": html.escape(dashboard.team),
        "user": html.escape(dashboard.user),
        "machine": html.escape(dashboard.machine),
        "nav": nav,
        "sections": sections,
        "styles": styles,
        "scripts": scripts,
    }
    # One pass: a value (a user's name) holding "{{…}}" is not read as a placeholder.
    return re.sub(r"\{\{(\w+)\}\}", lambda found: values[found.group(1)], text)


def create_app(
    dashboard: Dashboard, pages: Sequence[Page], *, token: str, hosts: set[str], cookie: str
) -> Guard:
    """The app for `dashboard` with `pages`, behind the guard for `token` and `hosts`."""
    page = shell(dashboard, pages)

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers=NO_STORE)

    async def events(request: Request) -> Response:
        return StreamingResponse(
            dashboard.feed.subscribe(),
            media_type="text/event-stream",
            headers={**NO_STORE, "x-accel-buffering": "no"},
        )

    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/api/events", events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    for each in pages:
        routes += each.routes
    app = Starlette(routes=routes)
    return Guard(app, token=token, csrf=dashboard.csrf, hosts=hosts, cookie=cookie)
