"""The console's templates (Jinja2, in templates/) and static files (in static/).

Every template is rendered with autoescaping on and undefined names refused: recorded values
and recorded source are hostile text, and nothing a template prints is ever marked safe. The
static files are read once, from a fixed list, and served with their own types.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .._auth import PERMISSIONS
from .._models import Role

__all__ = ["STATIC", "page", "static_file"]

HERE = Path(__file__).resolve().parent
STATIC = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "mark.svg": "image/svg+xml",
}


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return environment


def page(
    request: Request, name: str, context: dict[str, Any], *, status: int = 200
) -> HTMLResponse:
    """`name` rendered with `context` and what every page shows: who is signed in, what
    their role may do (the API's table), and the CSRF token forms carry."""
    visitor = context.get("visitor")
    role = visitor.principal.role if visitor is not None else None
    granted = PERMISSIONS.get(role, frozenset()) if isinstance(role, Role) else frozenset()
    body = (
        _environment()
        .get_template(name)
        .render(
            request_path=request.url.path,
            can=lambda permission: permission in granted,
            csrf=visitor.csrf if visitor is not None else "",
            **context,
        )
    )
    return HTMLResponse(body, status_code=status)


def static_file(name: str) -> Response:
    """One of the console's own static files (only those named in STATIC)."""
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    return Response((HERE / "static" / name).read_bytes(), media_type=STATIC[name])
