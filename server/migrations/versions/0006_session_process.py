"""the process a session replays

Revision ID: 0006
Revises: 0005

A recording holds a stream for every process the recorded one forked (`--process 1` on the
command line); a session opens one of them, "" being the recorded process itself.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("process", sa.String(length=100), nullable=False, server_default="")
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_column("process")
