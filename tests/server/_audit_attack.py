"""The attack of issue 21, finding 8, as a database writer would run it: no key, only the
rows and the published digest algorithm."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

import sealtrace.server._audit as audit
from sealtrace.server._models import AuditEvent


def rechain_after_rewrite(factory: Any, seq: int, **changes: object) -> None:
    """Change row `seq`'s fields, then recompute its digest and every digest after it in its
    chain, so every digest matches its fields and its predecessor again."""
    with factory() as db:
        heads: dict[str, bytes] = {}
        for row in db.scalars(select(AuditEvent).order_by(AuditEvent.seq)):
            if row.seq == seq:
                for name, value in changes.items():
                    setattr(row, name, value)
            if row.seq >= seq:
                row.previous = heads.get(row.chain, audit.GENESIS)
                row.digest = audit._digest(row.previous, row)
            heads[row.chain] = row.digest
        db.commit()
