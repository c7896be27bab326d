"""a run's request count

Revision ID: 0005
Revises: 0004

The recorder reports how many HTTP requests the run's request index holds when the run ends,
so that the console's runs list can show it without opening the sealed recording.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("requests", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("requests")
