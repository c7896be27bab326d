"""the console's browser sign-ins

Revision ID: 0004
Revises: 0003

A browser signed in to the web console holds a cookie whose secret is stored only as a keyed
digest here, so that signing out (or a time-out) ends it on the server at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sign_ins",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("secret_digest", sa.LargeBinary(length=32), nullable=False),
        sa.Column("created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_why", sa.String(length=20), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("console_sign_ins", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_console_sign_ins_tenant_id"), ["tenant_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_console_sign_ins_user_id"), ["user_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("console_sign_ins", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_console_sign_ins_user_id"))
        batch_op.drop_index(batch_op.f("ix_console_sign_ins_tenant_id"))
    op.drop_table("console_sign_ins")
