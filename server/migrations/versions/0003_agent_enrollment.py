"""agents enroll one at a time; each agent's credential names its agent

Revision ID: 0003
Revises: 0002

Until this revision one tenant-wide `agent` token registered any number of agents, so whoever
held it could register their own and be assigned the next session (issue 21, finding 3).
Now an agent enrolls with a one-time credential (`agent_enrollments`) and gets an `agent`
token whose row names it (`api_tokens.agent_id`). The tenant-wide agent tokens are revoked
here, not deleted (the audit trail names them), and agents registered with them are retired:
they hold no credential of their own, so no session would ever be assigned to them again.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_enrollments",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("secret_digest", sa.LargeBinary(length=32), nullable=False),
        sa.Column("minted_by", sa.String(length=200), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used", sa.DateTime(timezone=True), nullable=True),
        sa.Column("agent_id", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"]),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("agent_enrollments", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_agent_enrollments_tenant_id"), ["tenant_id"], unique=False
        )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent_id", sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f("ix_api_tokens_agent_id"), ["agent_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_api_tokens_agent_id_agents"), "agents", ["agent_id"], ["id"]
        )
    now = dt.datetime.now(dt.UTC)
    tokens = sa.table("api_tokens", sa.column("scope", sa.String()),
                      sa.column("revoked", sa.DateTime(timezone=True)))  # fmt: skip
    agents = sa.table("agents", sa.column("status", sa.String()))
    connection = op.get_bind()
    connection.execute(
        tokens.update().where(tokens.c.scope == "agent", tokens.c.revoked.is_(None))
        .values(revoked=now)
    )  # fmt: skip
    connection.execute(agents.update().where(agents.c.status != "gone").values(status="gone"))


def downgrade() -> None:
    # The revoked tenant-wide tokens stay revoked and the retired agents retired: 0002's
    # registration by token would otherwise come back with them.
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_api_tokens_agent_id_agents"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_api_tokens_agent_id"))
        batch_op.drop_column("agent_id")
    with op.batch_alter_table("agent_enrollments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_enrollments_tenant_id"))
    op.drop_table("agent_enrollments")
