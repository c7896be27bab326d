"""A tenant's users and tokens, for its admins (users:manage): list them, add a user (its
password shown once), mint a record or launcher token (shown once), revoke a token. Each
change is the audit event the command line writes for it (`user.create`, `token.create`,
`token.revoke`), with the admin as its actor. Only the tenant's own rows are ever touched.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .._auth import Principal, hash_password, issue_token, revoke_token
from .._errors import ActionRefused
from .._models import ApiToken, Role, Scope, User

if TYPE_CHECKING:
    from .._deps import Services

__all__ = ["add_user", "mint_token", "revoke", "tokens", "users"]

BAD, NOT_FOUND, CONFLICT = 422, 404, 409
MINTABLE = (Scope.RECORD, Scope.LAUNCHER)


def users(db: Session, tenant_id: int) -> list[User]:
    return list(db.scalars(select(User).where(User.tenant_id == tenant_id).order_by(User.name)))


def tokens(db: Session, tenant_id: int) -> list[ApiToken]:
    """The tenant's tokens, newest first (never a secret: only digests are stored)."""
    return list(db.scalars(select(ApiToken).where(ApiToken.tenant_id == tenant_id)
                           .order_by(ApiToken.created.desc()).limit(200)))  # fmt: skip


def add_user(services: Services, who: Principal, name: str, role: str) -> str:
    """A new user of the admin's tenant; its password (shown once)."""
    name = name.strip()
    if not name or len(name) > 100 or not name.replace("-", "").replace(".", "").isalnum():
        raise ActionRefused(BAD, "a user name is letters, digits, '.' and '-', at most 100")
    try:
        kind = Role(role)
    except ValueError:
        raise ActionRefused(BAD, f"no role {role!r}") from None
    password = secrets.token_urlsafe(18)
    with services.factory() as db:
        db.add(User(tenant_id=who.tenant_id, name=name, role=kind,
                    password_hash=hash_password(password)))  # fmt: skip
        try:
            db.commit()
        except IntegrityError:
            raise ActionRefused(CONFLICT, f"there is already a user {name}") from None
    services.audit(who, "user.create", f"user:{name} ({kind.value})", "ok")
    return password


def mint_token(services: Services, who: Principal, scope: str, name: str) -> str:
    """A record or launcher token of the admin's tenant (shown once)."""
    try:
        kind = Scope(scope)
    except ValueError:
        kind = Scope.USER
    if kind not in MINTABLE:
        raise ActionRefused(BAD, "a token here is a record or a launcher token")
    name = (name.strip() or "token")[:100]
    with services.factory() as db:
        token = issue_token(db, services.token_key, tenant_id=who.tenant_id, scope=kind,
                            name=name)  # fmt: skip
        db.commit()
    services.audit(who, "token.create", f"{kind.value}-token:{token.split('_')[1]} ({name})", "ok")
    return token


def revoke(services: Services, who: Principal, token_id: str) -> None:
    with services.factory() as db:
        row = db.get(ApiToken, token_id)
        if row is None or row.tenant_id != who.tenant_id:
            raise ActionRefused(NOT_FOUND, f"no token {token_id}")
        revoke_token(db, token_id)
        db.commit()
        target = f"{row.scope.value}-token:{token_id} ({row.name})"
    services.audit(who, "token.revoke", target, "ok")


def describe_token(row: ApiToken) -> dict[str, Any]:
    now = dt.datetime.now(dt.UTC)
    state = (
        "revoked" if row.revoked else "expired" if row.expires and row.expires <= now else "live"
    )
    return {"id": row.id, "scope": row.scope.value, "name": row.name, "created": row.created,
            "state": state, "agent": row.agent_id}  # fmt: skip
