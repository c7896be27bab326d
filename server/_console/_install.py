"""How the app serves the console: its pages, the headers of every console response, and
the way back to the sign-in page for a browser that is not (or no longer) signed in."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import FastAPI
from fastapi.exception_handlers import http_exception_handler
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._deps import SignInNeeded
from ._headers import PREFIX, secure_headers
from ._pages import router
from ._render import page
from ._sign_ins import COOKIE

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Serve the console from `app`: its pages, its headers, and the way back to sign-in."""
    app.include_router(router)
    app.middleware("http")(secure_headers)

    async def sign_in_first(request: Request, exc: Exception) -> Response:
        why = exc.why if isinstance(exc, SignInNeeded) else ""
        response = RedirectResponse(f"/console/sign-in{f'?why={quote(why)}' if why else ''}", 303)
        response.delete_cookie(COOKIE, path="/console")
        return response

    app.add_exception_handler(SignInNeeded, sign_in_first)

    async def refusal_page(request: Request, exc: Exception) -> Response:
        """A refusal before a console route ran (a form without its CSRF token, a body too
        large) is a page, like the console's others; the API's stay JSON."""
        assert isinstance(exc, HTTPException)
        if request.url.path == PREFIX or request.url.path.startswith(PREFIX + "/"):
            context = {"visitor": None, "status": exc.status_code, "detail": exc.detail,
                       "retry": ""}  # fmt: skip
            return page(request, "refused.html", context, status=exc.status_code)
        return await http_exception_handler(request, exc)

    app.add_exception_handler(HTTPException, refusal_page)
