"""The server's tables (SQLAlchemy 2). Alembic migrations in `migrations/` create them; a
test checks the two agree.

Key material is stored only wrapped: a run's private key as KMS ciphertext (encryption
context {tenant, run, purpose}), API tokens, agent enrollments and passwords only as
digests.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    DateTime,
    Enum,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

_Owned = TypeVar("_Owned", "Run", "PlatformSession", "Agent")

__all__ = [
    "Agent",
    "AgentEnrollment",
    "ApiToken",
    "AuditEvent",
    "Base",
    "ConsoleSignIn",
    "PlatformSession",
    "Role",
    "Run",
    "RunStatus",
    "Scope",
    "Tenant",
    "User",
    "UtcDateTime",
    "owned",
]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UtcDateTime(TypeDecorator[dt.datetime]):
    """A timestamp that is always timezone-aware UTC when read back. PostgreSQL keeps the
    zone; SQLite hands back naive datetimes, which were written in UTC."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        return value.astimezone(dt.UTC) if value is not None and value.tzinfo else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class Base(DeclarativeBase):
    pass


def owned(db: Any, model: type[_Owned], key: object, tenant_id: int) -> _Owned | None:
    """The row of `model` with primary key `key`, if it belongs to the tenant; None otherwise
    (callers answer 404 alike for another tenant's row and for none)."""
    row = db.get(model, key)
    return row if row is not None and row.tenant_id == tenant_id else None


def _enum(kind: type[enum.Enum]) -> Enum:
    """Stored as its values ("oncall"), in a plain string column."""
    return Enum(kind, native_enum=False, length=20, values_callable=lambda e: [m.value for m in e])


class Role(enum.StrEnum):
    ADMIN = "admin"
    ONCALL = "oncall"
    SECURITY = "security"
    AUDITOR = "auditor"


class Scope(enum.StrEnum):
    USER = "user"  # a signed-in user's token: the user's role decides
    RECORD = "record"  # lease keys, register and finish runs; nothing else
    # One enrolled agent's own credential (its row names the agent): that agent's heartbeat
    # and its session's traffic; nothing else. Revoked when the agent is gone.
    AGENT = "agent"
    LAUNCHER = "launcher"  # mint one-time agent enrollments; nothing else


class RunStatus(enum.StrEnum):
    MINTED = "minted"  # a key pair waiting for a run
    LEASED = "leased"  # its public key is with a recorder
    RECORDING = "recording"
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"
    FAILED = "failed"


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)


class User(Base):
    __tablename__ = "users"
    __table_args__ = (UniqueConstraint("tenant_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(100))
    role: Mapped[Role] = mapped_column(_enum(Role))
    password_hash: Mapped[str] = mapped_column(String(200))  # argon2id
    created: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)


class ApiToken(Base):
    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public half of the token
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"), nullable=True)
    scope: Mapped[Scope] = mapped_column(_enum(Scope))
    name: Mapped[str] = mapped_column(String(100))
    secret_digest: Mapped[bytes] = mapped_column(LargeBinary(32))  # keyed BLAKE2b
    created: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)
    expires: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    revoked: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # An `agent` token stands for this one agent and no other (sealtrace.server._enrollment).
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id"), nullable=True, index=True)


class AgentEnrollment(Base):
    """A one-time credential that lets one agent enroll (sealtrace.server._enrollment):
    minted by whatever starts the agent, short-lived, consumed by its first use."""

    __tablename__ = "agent_enrollments"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public half
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    secret_digest: Mapped[bytes] = mapped_column(LargeBinary(32))  # keyed BLAKE2b
    minted_by: Mapped[str] = mapped_column(String(200))  # the audit log's actor
    created: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)
    expires: Mapped[dt.datetime] = mapped_column(UtcDateTime())
    used: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The agent it enrolled (set in the transaction that used it).
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id"), nullable=True)


class Run(Base):
    """One run's key pair and, once a recorder leases it, the run itself."""

    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    status: Mapped[RunStatus] = mapped_column(_enum(RunStatus))
    public_key: Mapped[bytes] = mapped_column(LargeBinary(32))
    wrapped_private_key: Mapped[bytes] = mapped_column(LargeBinary(512))  # KMS ciphertext
    minted: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)
    leased: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    lease_token_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Registered by the recorder: the recording header's HPKE-wrapped recording key
    # (encapsulated key || ciphertext; useless without the run's private key).
    wrapped_recording_key: Mapped[bytes | None] = mapped_column(LargeBinary(128), nullable=True)
    store: Mapped[str | None] = mapped_column(String(500), nullable=True)  # s3://bucket/prefix
    service: Mapped[str | None] = mapped_column(String(200), nullable=True)
    host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    started: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    ended: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    exit_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # How many HTTP requests the run's request index holds, as its recorder reported when the
    # run ended (None: not reported; the index itself stays inside the sealed recording).
    requests: Mapped[int | None] = mapped_column(Integer, nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)


class Agent(Base):
    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"))
    public_key: Mapped[bytes] = mapped_column(LargeBinary(32))  # made at the agent's boot
    queue: Mapped[str] = mapped_column(String(100), unique=True)
    status: Mapped[str] = mapped_column(String(20))  # idle, busy, gone
    registered: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)
    seen: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)


class PlatformSession(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id"), nullable=True)
    status: Mapped[str] = mapped_column(String(20))  # assigned, ready, closed, failed
    # The process of the run it replays: "" the recorded one, "1" the first it forked, ...
    process: Mapped[str] = mapped_column(String(100), default="", server_default="")
    opened: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)
    closed: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    detail: Mapped[str | None] = mapped_column(Text, nullable=True)


class ConsoleSignIn(Base):
    """A browser signed in to the console (sealtrace.server._console): its cookie is
    `cs_<id>_<secret>`, of which only the id and a keyed BLAKE2b digest of the secret are
    stored, so neither a database dump nor a log line signs anyone in. It ends when the user
    signs out (revoked), when it sits idle past the console's idle time-out or at its absolute
    `expires`. It is no API token: the API does not accept it."""

    __tablename__ = "console_sign_ins"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public half
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    secret_digest: Mapped[bytes] = mapped_column(LargeBinary(32))  # keyed BLAKE2b
    created: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)
    seen: Mapped[dt.datetime] = mapped_column(UtcDateTime(), default=_now)  # last request
    expires: Mapped[dt.datetime] = mapped_column(UtcDateTime())  # absolute time-out
    ended: Mapped[dt.datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # Why it ended: "signed out", "idle", "expired", "replaced" (a new sign-in in its browser).
    ended_why: Mapped[str | None] = mapped_column(String(20), nullable=True)


class AuditEvent(Base):
    """Append-only and hash-chained per tenant (sealtrace.server._audit): each row's digest
    covers the one before it in its chain, so a changed, removed or reordered row breaks the
    chain, and its MAC under the audit key (held by KMS, never here) vouches for the chain up
    to it, so recomputing the digests after a rewrite does not hide it."""

    __tablename__ = "audit_events"
    __table_args__ = (UniqueConstraint("chain", "chain_seq"),)

    seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    chain: Mapped[str] = mapped_column(String(40))  # "tenant:<id>", or "platform"
    chain_seq: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"))
    at: Mapped[dt.datetime] = mapped_column(UtcDateTime())
    tenant_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(100))
    target: Mapped[str] = mapped_column(String(300))
    result: Mapped[str] = mapped_column(String(20))  # ok, denied, failed
    detail: Mapped[str] = mapped_column(Text, default="")
    previous: Mapped[bytes] = mapped_column(LargeBinary(32))
    digest: Mapped[bytes] = mapped_column(LargeBinary(32), unique=True)
    # The audit key's MAC of (chain, chain_seq, digest); None only on rows written before
    # the chain was keyed (migration 0002), which a later MACed head vouches for.
    mac: Mapped[bytes | None] = mapped_column(LargeBinary(64), nullable=True)
