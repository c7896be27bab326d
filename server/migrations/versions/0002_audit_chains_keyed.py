"""audit chains per tenant, each row MACed by the audit key

Revision ID: 0002
Revises: 0001

Existing rows were one unkeyed chain. They are re-chained per tenant here with the encoding
of this revision (frozen below: the module's may change later) and left without a MAC, which
a migration cannot make (the key is in KMS). Each chain verifies as broken until its next
event is appended: that row's MAC then vouches for everything before it. Rows rewritten
before this migration were never detectable and are not now.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_BIG = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _digest(previous: bytes, row: sa.Row[tuple[object, ...]], chain: str, chain_seq: int) -> bytes:
    at = row.at if row.at.tzinfo else row.at.replace(tzinfo=dt.UTC)
    fields = [row.seq, chain, chain_seq, at.astimezone(dt.UTC).isoformat(timespec="microseconds"),
              row.tenant_id, row.actor, row.action, row.target, row.result, row.detail]  # fmt: skip
    body = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(previous + body).digest()


def upgrade() -> None:
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chain", sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column("chain_seq", _BIG, nullable=True))
        batch_op.add_column(sa.Column("mac", sa.LargeBinary(length=64), nullable=True))
    names = ("seq", "tenant_id", "actor", "action", "target", "result", "detail", "previous",
             "digest", "chain", "chain_seq")  # fmt: skip
    events = sa.table(
        "audit_events",
        sa.column("at", sa.DateTime(timezone=True)),
        *(sa.column(name) for name in names),
    )
    connection = op.get_bind()
    heads: dict[str, tuple[int, bytes]] = {}
    for row in connection.execute(sa.select(events).order_by(events.c.seq)).all():
        chain = "platform" if row.tenant_id is None else f"tenant:{row.tenant_id}"
        position, previous = heads.get(chain, (0, bytes(32)))
        digest = _digest(previous, row, chain, position + 1)
        connection.execute(
            events.update().where(events.c.seq == row.seq).values(
                chain=chain, chain_seq=position + 1, previous=previous, digest=digest
            )
        )  # fmt: skip
        heads[chain] = (position + 1, digest)
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.alter_column("chain", existing_type=sa.String(length=40), nullable=False)
        batch_op.alter_column("chain_seq", existing_type=_BIG, nullable=False)
        batch_op.create_unique_constraint(
            batch_op.f("uq_audit_events_chain_chain_seq"), ["chain", "chain_seq"]
        )


def downgrade() -> None:
    # The rows keep their per-tenant digests: 0001's single-chain verification no longer
    # holds for them.
    with op.batch_alter_table("audit_events", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_audit_events_chain_chain_seq"), type_="unique")
        batch_op.drop_column("mac")
        batch_op.drop_column("chain_seq")
        batch_op.drop_column("chain")
