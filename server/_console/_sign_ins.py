"""Browser sign-ins to the console: the cookie, what the server keeps of it, its time-outs,
and the CSRF tokens bound to it.

A sign-in's cookie is `cs_<id>_<secret>`. The server keeps the id and a BLAKE2b digest of the
secret keyed with its secret key (as for API tokens), never the secret, so a database dump or
a log line signs nobody in; a new id is made at every sign-in (the old one, if the browser
held one, is ended), so nothing set before sign-in survives it. It ends when the user signs
out, after `idle` seconds without a request, or `absolute` seconds after it began, whichever
comes first; an ended sign-in is refused at once, on every request. It is not an API token:
`resolve_token` reads `st_` tokens from `api_tokens` only, so the cookie opens nothing there.

The CSRF token of a sign-in is an HMAC of its id under the server's secret key: a page puts it
in every form (and in a meta element for the one script that posts), and every state-changing
request must carry it. Before sign-in, the sign-in form is bound the same way to a random
value in a short-lived cookie of its own.

It must never log, return or store a cookie's secret, and never accept one whose digest does
not match.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.orm import Session

from .._auth import Principal, secret_digest
from .._models import ConsoleSignIn, Scope, User

__all__ = [
    "COOKIE",
    "SIGN_IN_COOKIE",
    "Ended",
    "Visitor",
    "csrf_token",
    "end",
    "resolve",
    "sign_in_token",
    "start",
]

COOKIE = "sealtrace_console"
# A sign-in's last request is written down at most this often (seconds; a quarter of the
# idle time-out when that is shorter): the idle time-out is that much coarser, and most
# requests write nothing.
_SEEN_EVERY = 5.0
SIGN_IN_COOKIE = "sealtrace_sign_in"  # binds the sign-in form before anyone is signed in
_PREFIX = "cs"


@dataclass(frozen=True)
class Visitor:
    """A signed-in browser: who it acts as (the API's Principal, so the role table and the
    audit log treat it as they treat the API's users), and its sign-in."""

    principal: Principal
    sign_in_id: str
    csrf: str
    expires: dt.datetime


@dataclass(frozen=True)
class Ended:
    """A cookie that signs nobody in, and why (shown on the sign-in page): "idle", "expired",
    "signed out", "replaced" or "unknown"."""

    why: str


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def start(
    db: Session, key: bytes, user: User, *, absolute: float, replacing: str | None = None
) -> tuple[str, ConsoleSignIn]:
    """A new sign-in for `user` (its cookie value, shown once, and its row); the sign-in
    `replacing` (the cookie the browser came with) is ended. Committed."""
    if replacing:
        found = _parse(replacing)
        if found is not None:
            end(db, found[0], "replaced")
    sign_in_id = secrets.token_hex(12)
    secret = secrets.token_urlsafe(32)
    now = _now()
    row = ConsoleSignIn(id=sign_in_id, tenant_id=user.tenant_id, user_id=user.id,
                        secret_digest=secret_digest(key, secret), created=now, seen=now,
                        expires=now + dt.timedelta(seconds=absolute))  # fmt: skip
    db.add(row)
    db.commit()
    return f"{_PREFIX}_{sign_in_id}_{secret}", row


def _parse(cookie: str) -> tuple[str, str] | None:
    prefix, _, rest = cookie.partition("_")
    sign_in_id, _, secret = rest.partition("_")
    if prefix != _PREFIX or not sign_in_id or not secret or len(cookie) > 200:
        return None
    return sign_in_id, secret


def resolve(db: Session, key: bytes, cookie: str, *, idle: float) -> Visitor | Ended:
    """The visitor a cookie stands for, or why it stands for nobody. A live sign-in's last
    request time moves to now (committed, when it is more than _SEEN_EVERY old); one past a
    time-out is ended here."""
    found = _parse(cookie)
    if found is None:
        return Ended("unknown")
    sign_in_id, secret = found
    row = db.get(ConsoleSignIn, sign_in_id)
    if row is None or not hmac.compare_digest(row.secret_digest, secret_digest(key, secret)):
        return Ended("unknown")
    if row.ended is not None:
        return Ended(row.ended_why or "signed out")
    now = _now()
    why = (
        "expired"
        if now >= row.expires
        else "idle"
        if (now - row.seen).total_seconds() >= idle
        else None
    )
    if why is not None:
        end(db, sign_in_id, why)
        return Ended(why)
    user = db.get(User, row.user_id)
    if user is None or user.tenant_id != row.tenant_id:
        return Ended("unknown")
    # One write every few seconds at most (a quarter of the idle time-out, if shorter).
    if (now - row.seen).total_seconds() >= min(_SEEN_EVERY, idle / 4):
        row.seen = now
        db.commit()
    principal = Principal(token_id=f"console:{sign_in_id}", tenant_id=row.tenant_id,
                          scope=Scope.USER, user_id=user.id, user_name=user.name,
                          role=user.role)  # fmt: skip
    return Visitor(principal, sign_in_id, csrf_token(key, sign_in_id), row.expires)


def end(db: Session, sign_in_id: str, why: str) -> None:
    """End a sign-in at once (its cookie opens nothing from now on). Committed."""
    db.execute(
        update(ConsoleSignIn)
        .where(ConsoleSignIn.id == sign_in_id, ConsoleSignIn.ended.is_(None))
        .values(ended=_now(), ended_why=why)
    )
    db.commit()


def csrf_token(key: bytes, sign_in_id: str) -> str:
    """The CSRF token of a sign-in: what only this server could have given its pages."""
    return _mac(key, b"sealtrace-console-csrf\0" + sign_in_id.encode())


def sign_in_token(key: bytes, nonce: str) -> str:
    """The sign-in form's token, bound to the random value in SIGN_IN_COOKIE."""
    return _mac(key, b"sealtrace-console-sign-in\0" + nonce.encode())


def _mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()
