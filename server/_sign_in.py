"""A person signs in with a tenant, a user name and a password: one check, one rate limit and
one audit trail for both ways in. The v1 API (`POST /v1/auth/login`) then issues a user
token; the console (sealtrace.server._console) a browser sign-in of its own.

A refusal says nothing about who exists: an unknown user or tenant costs the same argon2 work
as a wrong password (sealtrace.server._auth.check_login) and gets the same 401. Repeated
failures are refused with 429 for a while (sealtrace.server._login_limit). Every attempt is
an audit event `login` (target the account, or `user:NAME` when it succeeded; `via` in the
details says which way the person came in when it was not the API).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from ._auth import Principal, check_login
from ._errors import ActionRefused
from ._models import Scope, Tenant, User

if TYPE_CHECKING:
    from ._deps import Services

__all__ = ["sign_in"]

TOO_MANY, UNAUTHORIZED = 429, 401
REFUSED = "wrong tenant, user or password"


def sign_in(
    services: Services,
    db: Session,
    *,
    tenant: str,
    user: str,
    password: str,
    address: str,
    via: str = "",
) -> User:
    """The user these credentials are; ActionRefused (401, or 429 with Retry-After) if they
    are not anyone's, or if this account or address has failed too often lately."""
    account = f"{tenant}/{user}"
    detail = f"via {via}" if via else ""
    wait = services.logins.retry_after(address, account)
    if wait is not None:
        services.audit(None, "login", account, "denied",
                       f"rate limited ({address}){f', {detail}' if detail else ''}",
                       tenant_id=_tenant_id(db, tenant))  # fmt: skip
        raise ActionRefused(TOO_MANY, "too many failed sign-ins",
                            headers={"Retry-After": str(math.ceil(wait))})  # fmt: skip
    found = db.scalars(
        select(User).join(Tenant, Tenant.id == User.tenant_id)
        .where(Tenant.name == tenant, User.name == user)
    ).first()  # fmt: skip
    if not check_login(found, password) or found is None:
        services.logins.failed(address, account)
        services.audit(None, "login", account, "denied", detail, tenant_id=_tenant_id(db, tenant))
        raise ActionRefused(UNAUTHORIZED, REFUSED)
    services.logins.succeeded(address, account)
    who = Principal("", found.tenant_id, Scope.USER, found.id, found.name, found.role)
    services.audit(who, "login", f"user:{found.name}", "ok", detail)
    return found


def _tenant_id(db: Session, name: str) -> int | None:
    found: int | None = db.scalars(select(Tenant.id).where(Tenant.name == name)).first()
    return found
