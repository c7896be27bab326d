"""Agents' identities: a one-time enrollment credential for each agent, minted by whatever
starts it, and the credential the agent gets in exchange, bound to its agent id, which dies
with the agent.

Why: a single tenant-wide agent token let whoever held it register an agent of their own,
heartbeat it, be assigned the next session and take its sealed key (issue 21, finding 3).
Now nothing an agent holds can make another agent:

- an enrollment is `ste_<id>_<secret>`, minted for one agent by an operator (`sealtrace
  server enroll-agent`), an administrator or a `launcher` token (`POST
  /v1/agents/enrollments`). Only a keyed BLAKE2b digest of its secret is stored, as for API
  tokens; it lives minutes (DEFAULT_TTL unless the minter says otherwise, never more than
  MAX_TTL), and its first use consumes it in one conditional UPDATE, so of any number of
  presentations, concurrent ones included, exactly one enrolls an agent;
- enrolling stores the agent (the X25519 public key it made at boot, its queue) and issues
  an `agent` token whose row names that agent: it acts as that agent only, and expires;
- retire() revokes it when the agent is gone (its session ended, the server gave up on it),
  and assignable() is what session assignment requires of an agent's credential.

It must never store a secret, nor let a credential outlive its agent or enroll twice.
"""

from __future__ import annotations

import datetime as dt
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, exists, update
from sqlalchemy.orm import Session, sessionmaker

from ._auth import issue_token, secret_digest
from ._errors import EnrollmentRefused
from ._models import Agent, AgentEnrollment, ApiToken, Scope

__all__ = [
    "DEFAULT_TTL",
    "MAX_TTL",
    "Enrolled",
    "Enrollment",
    "assignable",
    "enroll",
    "mint",
    "retire",
]

PREFIX = "ste"  # not "st": an enrollment is never a bearer token for any other route
DEFAULT_TTL = dt.timedelta(minutes=10)
MAX_TTL = dt.timedelta(days=1)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Enrollment:
    """A minted enrollment: the credential (shown once), its id and its expiry."""

    credential: str
    enrollment_id: str
    expires: dt.datetime


@dataclass(frozen=True)
class Enrolled:
    """An enrolled agent and its credential (shown once)."""

    agent_id: str
    queue: str
    tenant_id: int
    enrollment_id: str
    token_id: str
    credential: str
    expires: dt.datetime


def mint(
    db: Session, key: bytes, *, tenant_id: int, minted_by: str, ttl: dt.timedelta = DEFAULT_TTL
) -> Enrollment:
    """A new enrollment for one agent of the tenant. Added to `db`, not committed."""
    if not dt.timedelta(0) < ttl <= MAX_TTL:
        raise ValueError(f"an enrollment lives more than 0 s and at most {MAX_TTL}")
    enrollment_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    expires = _now() + ttl
    db.add(
        AgentEnrollment(
            id=enrollment_id,
            tenant_id=tenant_id,
            secret_digest=secret_digest(key, secret),
            minted_by=minted_by[:200],
            expires=expires,
        )
    )
    return Enrollment(f"{PREFIX}_{enrollment_id}_{secret}", enrollment_id, expires)


def enroll(
    factory: sessionmaker[Session],
    key: bytes,
    presented: str,
    public_key: bytes,
    *,
    lifetime: dt.timedelta,
) -> Enrolled:
    """Use the enrollment `presented` to enroll an agent with `public_key` (raw X25519),
    whose credential lives `lifetime` at most. EnrollmentRefused for an unknown, wrong,
    expired or used enrollment (the agent is not made, nothing is consumed but by a winner);
    ValueError for a malformed public key (checked first: a typo does not burn it)."""
    if len(public_key) != 32:
        raise ValueError("an agent's public key is 32 raw X25519 bytes")
    prefix, _, rest = presented.partition("_")
    enrollment_id, _, secret = rest.partition("_")
    if prefix != PREFIX or not enrollment_id or not secret or len(enrollment_id) > 32:
        raise EnrollmentRefused("not an enrollment credential")
    now = _now()
    with factory() as db:
        row = db.get(AgentEnrollment, enrollment_id)
        if row is None:
            raise EnrollmentRefused("unknown enrollment", enrollment_id=enrollment_id)
        tenant_id = row.tenant_id

        def refused(why: str) -> EnrollmentRefused:
            return EnrollmentRefused(why, tenant_id=tenant_id, enrollment_id=enrollment_id)

        if not hmac.compare_digest(row.secret_digest, secret_digest(key, secret)):
            raise refused("wrong secret")
        if row.used is not None:
            raise refused(f"already used (by {row.agent_id})")
        if row.expires <= now:
            raise refused("expired")
        # The one conditional write that decides: of concurrent presentations, the first to
        # commit consumes it and every other matches no row (PostgreSQL re-checks the
        # condition after the winner's lock; SQLite has one writer at a time).
        agent_id = f"agent-{secrets.token_hex(8)}"
        taken = cast(CursorResult[Any], db.execute(
            update(AgentEnrollment)
            .where(AgentEnrollment.id == enrollment_id, AgentEnrollment.used.is_(None),
                   AgentEnrollment.expires > now)
            .values(used=now)
        ))  # fmt: skip
        if taken.rowcount != 1:
            db.rollback()
            raise refused("already used (concurrently)")
        db.add(Agent(id=agent_id, tenant_id=tenant_id, public_key=public_key,
                     queue=f"sealtrace.agent.{agent_id}", status="idle", registered=now,
                     seen=now))  # fmt: skip
        db.flush()  # the agent row first: the enrollment and the token refer to it
        db.execute(
            update(AgentEnrollment)
            .where(AgentEnrollment.id == enrollment_id)
            .values(agent_id=agent_id)
        )
        credential = issue_token(db, key, tenant_id=tenant_id, scope=Scope.AGENT,
                                 name=f"enrolled by {enrollment_id}", agent_id=agent_id,
                                 lifetime=lifetime)  # fmt: skip
        db.commit()
        return Enrolled(agent_id=agent_id, queue=f"sealtrace.agent.{agent_id}",
                        tenant_id=tenant_id, enrollment_id=enrollment_id,
                        token_id=credential.split("_")[1], credential=credential,
                        expires=now + lifetime)  # fmt: skip


def retire(db: Session, agent: Agent) -> None:
    """The agent is gone: it is never assigned again and its credential stops working at
    once (the token rows stay, for the audit trail). Not committed."""
    agent.status = "gone"
    db.execute(
        update(ApiToken)
        .where(ApiToken.agent_id == agent.id, ApiToken.revoked.is_(None))
        .values(revoked=_now())
    )


def assignable(now: dt.datetime) -> ColumnElement[bool]:
    """What an agent must hold to be assigned a session: its own credential, neither revoked
    nor expired. (An agent of before migration 0003 holds none.)"""
    return exists().where(
        ApiToken.agent_id == Agent.id,
        ApiToken.scope == Scope.AGENT,
        ApiToken.revoked.is_(None),
        ApiToken.expires > now,
    )
