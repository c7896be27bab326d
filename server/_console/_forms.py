"""What a console form sends: an urlencoded body, read with limits, and its CSRF token checked.

The console parses its forms itself (no multipart, nothing but
application/x-www-form-urlencoded), so a body is bounded in size and in fields before anything
reads it. Every state-changing request carries the token of its sign-in, in the form's `csrf`
field or (the one script that posts) an `X-CSRF-Token` header; one without it, or with
another, is refused (403) before the action runs.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from fastapi import HTTPException, Request

__all__ = ["MAX_BODY", "checked", "form_of"]

MAX_BODY = 64 * 1024
_MAX_FIELDS = 40
FORBIDDEN, TOO_LARGE, UNSUPPORTED = 403, 413, 415


async def form_of(request: Request) -> dict[str, str]:
    """The form's fields (the first value of each), or 413/415 for a body this console never
    sends."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("application/x-www-form-urlencoded", ""):
        raise HTTPException(UNSUPPORTED, "the console's forms are urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise HTTPException(TOO_LARGE, "the form is too large")
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True,
                          max_num_fields=_MAX_FIELDS, strict_parsing=False)  # fmt: skip
    except (UnicodeDecodeError, ValueError):
        raise HTTPException(TOO_LARGE, "the form has too many fields") from None
    return {name: values[0] for name, values in fields.items()}


def checked(request: Request, form: dict[str, str], expected: str) -> None:
    """Refuse (403) a state-changing request whose CSRF token is missing or not `expected`."""
    presented = form.get("csrf") or request.headers.get("x-csrf-token") or ""
    if not presented or not hmac.compare_digest(presented.encode(), expected.encode()):
        raise HTTPException(FORBIDDEN, "this form is out of date or not the console's: reload")
