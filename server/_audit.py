"""The audit log: every privileged action, who did it, when, and how it ended, in an
append-only table whose rows are hash-chained.

Each row's digest is SHA-256 over the previous row's digest and the row's own fields in a
fixed encoding, so verify() finds a changed field, a removed or inserted row, and rows put
in another order. The chain starts from 32 zero bytes. Appending takes the table's last row
under the transaction that writes the new one; concurrent writers are serialised by the
unique digest and the sequence number (one of them fails and retries).

The log never holds key material or recording content: targets are ids, details are short
descriptions the server writes itself.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ._models import AuditEvent

__all__ = ["GENESIS", "ChainProblem", "append", "verify"]

GENESIS = bytes(32)


def _digest(previous: bytes, event: AuditEvent) -> bytes:
    fields = [
        event.seq,
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


def append(
    factory: sessionmaker[Session],
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
    for _ in range(20):
        with factory() as db:
            last = db.scalars(select(AuditEvent).order_by(AuditEvent.seq.desc()).limit(1)).first()
            event = AuditEvent(
                seq=(last.seq + 1) if last else 1,
                at=dt.datetime.now(dt.UTC),
                tenant_id=tenant_id,
                actor=actor,
                action=action,
                target=target,
                result=result,
                detail=detail,
                previous=last.digest if last else GENESIS,
            )
            event.digest = _digest(event.previous, event)
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


def verify(db: Session) -> tuple[int, list[ChainProblem]]:
    """(rows checked, problems): an empty list means the chain is whole."""
    previous = GENESIS
    expected_seq = 1
    problems: list[ChainProblem] = []
    count = 0
    for event in db.scalars(select(AuditEvent).order_by(AuditEvent.seq)):
        count += 1
        if event.seq != expected_seq:
            problems.append(ChainProblem(event.seq, f"expected row {expected_seq}: rows missing"))
        if event.previous != previous:
            problems.append(ChainProblem(event.seq, "does not chain onto the row before it"))
        if _digest(event.previous, event) != event.digest:
            problems.append(ChainProblem(event.seq, "its fields do not match its digest"))
        previous = event.digest
        expected_seq = event.seq + 1
    return count, problems
