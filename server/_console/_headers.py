"""The headers every console response carries: a Content-Security-Policy that lets nothing run
but the console's own script file and nothing style the page but its own style sheet (no
inline script or style, no other origin, no plugins), no framing, no MIME sniffing, no
referrer; and no caching of anything but the static files (the pages show recorded values,
which must not linger in a browser's or a proxy's cache).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

__all__ = ["CSP", "PREFIX", "secure_headers"]

PREFIX = "/console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_ALWAYS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=(), payment=()",
}


async def secure_headers(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    response = await call_next(request)
    if request.url.path == PREFIX or request.url.path.startswith(PREFIX + "/"):
        response.headers.update(_ALWAYS)
        if request.url.path.startswith(PREFIX + "/static/"):
            response.headers["Cache-Control"] = "no-cache"
        else:
            response.headers["Cache-Control"] = "no-store"
            response.headers["Pragma"] = "no-cache"
    return response
