"""The audit log: every privileged action, who did it, when, and how it ended, in an
append-only table of hash chains, one per tenant (and one for the platform's own events),
whose heads only the audit key can vouch for.

A row's digest is SHA-256 over the previous digest of its chain and the row's own fields
(its global and chain sequence numbers among them) in a fixed encoding; each chain starts
from 32 zero bytes. The digests alone find a changed field, a removed, inserted or moved row
and rows put in another order, but not a rewrite that recomputes every digest after it: the
encoding is public and the database holds everything. So each row also carries a MAC, under
the audit key (sealtrace.server._audit_key: KMS in production), of its chain, its chain
position and its digest. Since a digest covers every row before it, the head's MAC vouches
for the whole chain; verification recomputes the digests and checks the head's MAC with the
key, so a rewrite needs the key, which the database never holds. What no MAC can show is a
tail cut back to an earlier, MACed row: verification reports each chain's head (sequence
number and digest) to be anchored outside the database.

Verification is per chain: a tenant's auditor checks, and counts, the tenant's rows only; the
operator's command line checks every chain and that the global sequence has no gaps.

Appending reads the last row (and the chain's last row) under the transaction that writes
the new one; concurrent writers are serialised by the global sequence number and the unique
(chain, position) pair (one of them fails and retries).

The log never holds key material or recording content: targets are ids, details are short
descriptions the server writes itself.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ._audit_key import AuditKey
from ._models import AuditEvent

__all__ = ["GENESIS", "PLATFORM", "ChainProblem", "Verdict", "append", "chain_of", "verify"]

GENESIS = bytes(32)
PLATFORM = "platform"  # the chain of events that belong to no tenant


def chain_of(tenant_id: int | None) -> str:
    return PLATFORM if tenant_id is None else f"tenant:{tenant_id}"


def _digest(previous: bytes, event: AuditEvent) -> bytes:
    fields = [
        event.seq,
        event.chain,
        event.chain_seq,
        event.at.astimezone(dt.UTC).isoformat(timespec="microseconds"),
        event.tenant_id,
        event.actor,
        event.action,
        event.target,
        event.result,
        event.detail,
    ]
    body = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(previous + body).digest()


def _mac_message(event: AuditEvent) -> bytes:
    """What a row's MAC covers: its chain, its position in it, and its digest (which covers
    its fields and, through `previous`, every row before it in the chain)."""
    position = json.dumps(["sealtrace-audit-v2", event.chain, event.chain_seq])
    return position.encode() + b"\n" + event.digest


def append(
    factory: sessionmaker[Session],
    key: AuditKey,
    *,
    actor: str,
    action: str,
    target: str,
    result: str,
    tenant_id: int | None = None,
    detail: str = "",
) -> AuditEvent:
    """Write one event in its own transaction (so a refused action is logged even when the
    action's own transaction rolls back)."""
    chain = chain_of(tenant_id)
    for _ in range(20):
        with factory() as db:
            last = db.scalars(select(AuditEvent).order_by(AuditEvent.seq.desc()).limit(1)).first()
            tail = db.scalars(
                select(AuditEvent).where(AuditEvent.chain == chain)
                .order_by(AuditEvent.chain_seq.desc()).limit(1)
            ).first()  # fmt: skip
            event = AuditEvent(
                seq=(last.seq + 1) if last else 1,
                chain=chain,
                chain_seq=(tail.chain_seq + 1) if tail else 1,
                at=dt.datetime.now(dt.UTC),
                tenant_id=tenant_id,
                actor=actor,
                action=action,
                target=target,
                result=result,
                detail=detail,
                previous=tail.digest if tail else GENESIS,
            )
            event.digest = _digest(event.previous, event)
            event.mac = key.mac(_mac_message(event))
            db.add(event)
            try:
                db.commit()
            except IntegrityError:  # another writer took this seq: chain onto theirs
                db.rollback()
                continue
            return event
    raise RuntimeError("could not append to the audit log")


@dataclass(frozen=True)
class ChainProblem:
    seq: int
    why: str


@dataclass(frozen=True)
class Head:
    """A chain's last row: anchor (chain, chain_seq, digest) elsewhere to notice a cut tail."""

    chain: str
    chain_seq: int
    digest: bytes


@dataclass
class Verdict:
    rows: int = 0
    problems: list[ChainProblem] = field(default_factory=list)
    heads: list[Head] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        return not self.problems


@dataclass
class _Chain:
    previous: bytes = GENESIS
    expected: int = 1
    last: AuditEvent | None = None


def verify(db: Session, key: AuditKey, *, tenant_id: int | None = None) -> Verdict:
    """Check one tenant's chain (`tenant_id`), or every chain and the global sequence (None:
    the operator's check). An empty list of problems means whole."""
    query = select(AuditEvent).order_by(AuditEvent.seq)
    if tenant_id is not None:
        query = query.where(AuditEvent.chain == chain_of(tenant_id))
    return _check(db.scalars(query), key, everything=tenant_id is None)


def _check(events: Iterable[AuditEvent], key: AuditKey, *, everything: bool) -> Verdict:
    verdict = Verdict()
    chains: dict[str, _Chain] = {}
    expected_seq = 1
    for event in events:
        verdict.rows += 1
        if everything and event.seq != expected_seq:
            verdict.problems.append(
                ChainProblem(event.seq, f"expected row {expected_seq}: rows missing")
            )
        expected_seq = event.seq + 1
        state = chains.setdefault(event.chain, _Chain())
        if event.chain != chain_of(event.tenant_id):
            verdict.problems.append(ChainProblem(event.seq, "is in another tenant's chain"))
        if event.chain_seq != state.expected:
            verdict.problems.append(ChainProblem(
                event.seq, f"expected {event.chain} row {state.expected}: rows missing"
            ))  # fmt: skip
        if event.previous != state.previous:
            verdict.problems.append(ChainProblem(event.seq, "does not chain onto its row before"))
        if _digest(event.previous, event) != event.digest:
            verdict.problems.append(ChainProblem(event.seq, "its fields do not match its digest"))
        state.previous, state.expected, state.last = event.digest, event.chain_seq + 1, event
    for name, state in chains.items():
        head = state.last
        assert head is not None  # a chain exists once it has a row
        verdict.heads.append(Head(name, head.chain_seq, head.digest))
        if head.mac is None or not key.verify(_mac_message(head), head.mac):
            verdict.problems.append(ChainProblem(
                head.seq, f"the head of {name} does not carry the audit key's MAC: the chain "
                "was rewritten or forged"
            ))  # fmt: skip
    verdict.problems.sort(key=lambda p: p.seq)
    return verdict
