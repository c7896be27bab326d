"""Who may do what: passwords (argon2id), API tokens with scopes, and the role table.

A token is `st_<id>_<secret>`: the id is stored, the secret only as a BLAKE2b digest keyed
with the server's secret key, so neither a database dump nor a log line can be replayed as
a token. A `record` token may lease keys and register and finish runs; a `launcher` token
may mint one-time agent enrollments; an `agent` token is one enrolled agent's credential
(sealtrace.server._enrollment): its row names the agent, it resolves to a principal bound
to that agent id, and it exchanges that agent's traffic only. An `agent` token that names no
agent (the tenant-wide kind of before migration 0003) resolves to nothing. A user token
carries its user's role, and PERMISSIONS says what each role may do. The OpenAPI description
of every endpoint names the permission it needs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import update
from sqlalchemy.orm import Session

from ._models import ApiToken, Role, Scope, User

__all__ = [
    "PERMISSIONS",
    "SCOPE_PERMISSIONS",
    "Principal",
    "check_login",
    "hash_password",
    "issue_token",
    "resolve_token",
    "revoke_token",
    "secret_digest",
    "verify_password",
]

# What each role may do. Changing a row here changes what the API allows: the auditor, for
# one, reads runs and the audit log but opens no sessions.
PERMISSIONS: dict[Role, frozenset[str]] = {
    Role.ADMIN: frozenset(
        {
            "runs:read",
            "sessions:open",
            "sessions:query",
            "audit:read",
            "users:manage",
            "agents:enroll",
        }
    ),
    Role.ONCALL: frozenset({"runs:read", "sessions:open", "sessions:query"}),
    Role.SECURITY: frozenset({"runs:read", "sessions:open", "sessions:query"}),
    Role.AUDITOR: frozenset({"runs:read", "audit:read"}),
}
SCOPE_PERMISSIONS: dict[Scope, frozenset[str]] = {
    Scope.RECORD: frozenset({"keys:lease", "runs:register"}),
    Scope.AGENT: frozenset({"agents:serve"}),
    Scope.LAUNCHER: frozenset({"agents:enroll"}),
}

_HASHER = PasswordHasher()  # argon2id with the library's current parameters


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


# Verified in place of an unknown user's hash, so that signing in as nobody costs the same
# argon2 work as a wrong password and the time of a refusal does not tell who exists.
_DUMMY_HASH = _HASHER.hash(secrets.token_urlsafe(24))


def check_login(user: User | None, password: str) -> bool:
    """Whether `password` is `user`'s; for no user, the same work and False."""
    if user is None:
        verify_password(_DUMMY_HASH, password)
        return False
    return verify_password(user.password_hash, password)


def verify_password(stored: str, password: str) -> bool:
    try:
        return _HASHER.verify(stored, password)
    except (VerificationError, InvalidHashError):
        return False


@dataclass(frozen=True)
class Principal:
    """Who a request acts as."""

    token_id: str
    tenant_id: int
    scope: Scope
    user_id: int | None = None
    user_name: str | None = None
    role: Role | None = None
    agent_id: str | None = None  # an agent token's one agent

    @property
    def permissions(self) -> frozenset[str]:
        if self.scope is Scope.USER and self.role is not None:
            return PERMISSIONS[self.role]
        return SCOPE_PERMISSIONS.get(self.scope, frozenset())

    @property
    def name(self) -> str:
        """For the audit log."""
        if self.user_name:
            return f"user:{self.user_name}"
        if self.agent_id:
            return f"agent:{self.agent_id}"
        return f"{self.scope.value}-token:{self.token_id}"


def secret_digest(key: bytes, secret: str) -> bytes:
    """What is stored of a credential's secret: BLAKE2b keyed with the server's secret."""
    return hashlib.blake2b(secret.encode(), key=key[:64], digest_size=32).digest()


def issue_token(
    db: Session,
    key: bytes,
    *,
    tenant_id: int,
    scope: Scope,
    name: str,
    user: User | None = None,
    lifetime: dt.timedelta | None = None,
    agent_id: str | None = None,
) -> str:
    """A new token (shown once; only its digest is kept). Added to `db`, not committed. An
    `agent` token is always one agent's (`agent_id`)."""
    if (scope is Scope.AGENT) != (agent_id is not None):
        raise ValueError("an agent token, and only an agent token, names its agent")
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    db.add(
        ApiToken(
            id=token_id,
            tenant_id=tenant_id,
            user_id=user.id if user is not None else None,
            scope=scope,
            name=name,
            secret_digest=secret_digest(key, secret),
            # A zero lifetime is an expired token, never an everlasting one.
            expires=dt.datetime.now(dt.UTC) + lifetime if lifetime is not None else None,
            agent_id=agent_id,
        )
    )
    return f"st_{token_id}_{secret}"


def revoke_token(db: Session, token_id: str) -> None:
    """The token stops resolving at once (its row stays, for the audit trail). Not
    committed."""
    db.execute(
        update(ApiToken)
        .where(ApiToken.id == token_id, ApiToken.revoked.is_(None))
        .values(revoked=dt.datetime.now(dt.UTC))
    )


def resolve_token(db: Session, key: bytes, token: str) -> Principal | None:
    """The principal a presented token stands for, or None (unknown, wrong, expired,
    revoked); every failure looks the same to the caller."""
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != "st" or not token_id or not secret:
        return None
    row = db.get(ApiToken, token_id)
    if row is None or not hmac.compare_digest(row.secret_digest, secret_digest(key, secret)):
        return None
    now = dt.datetime.now(dt.UTC)
    if row.revoked is not None or (row.expires is not None and row.expires <= now):
        return None
    user = db.get(User, row.user_id) if row.user_id is not None else None
    if row.scope is Scope.USER and user is None:
        return None
    if row.scope is Scope.AGENT and row.agent_id is None:
        return None  # the tenant-wide kind: it registered any agent, so it stands for none
    return Principal(
        token_id=row.id,
        tenant_id=row.tenant_id,
        scope=row.scope,
        user_id=user.id if user else None,
        user_name=user.name if user else None,
        role=user.role if user else None,
        agent_id=row.agent_id,
    )
