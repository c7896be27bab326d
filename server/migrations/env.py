"""Alembic's environment for sealtrace.server: run by sealtrace.server._db.migrate()."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from sealtrace.server._models import Base

config = context.config
engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
