"""The database: an engine and a session factory for a URL (SQLite by default, PostgreSQL in
production and CI), and the schema brought to the newest migration."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

__all__ = ["MIGRATIONS", "connect", "migrate"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def connect(url: str) -> tuple[Engine, sessionmaker[Session]]:
    engine = create_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":
        # Foreign keys are off by default in SQLite; the audit chain needs one writer at a time.
        @event.listens_for(engine, "connect")
        def _pragmas(connection: object, _record: object) -> None:
            cursor = connection.cursor()  # type: ignore[attr-defined]
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.close()

    return engine, sessionmaker(engine, expire_on_commit=False)


def migrate(url: str, revision: str = "head") -> None:
    """Upgrade the database at `url` to `revision` with the packaged Alembic migrations."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, revision)
