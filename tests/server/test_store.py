"""The server's database on SQLite and PostgreSQL: migrations, the audit chain, passwords and
tokens.

- the migrations build exactly the tables the models describe;
- the audit log verifies whole, and a changed field, a removed row, a reordered pair and a
  forged row each break it (the negative controls);
- passwords are argon2id and verify only themselves; a token resolves to its scope and
  role, and a wrong secret, an expired or revoked token, or a malformed one resolves to
  nothing; the database holds no token secret.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine, select, text, update

from sealtrace.server._audit import append, verify
from sealtrace.server._auth import (
    PERMISSIONS,
    hash_password,
    issue_token,
    resolve_token,
    verify_password,
)
from sealtrace.server._models import ApiToken, AuditEvent, Base, Role, Scope, Tenant, User

KEY = b"k" * 32


def test_migrations_build_the_models_tables(database_url: str) -> None:
    engine = create_engine(database_url)
    found = MetaData()
    found.reflect(engine)
    engine.dispose()
    tables = set(found.tables) - {"alembic_version"}
    assert tables == set(Base.metadata.tables)
    for name, table in Base.metadata.tables.items():
        assert {c.name for c in found.tables[name].columns} == {c.name for c in table.columns}


def _events(factory: Any, n: int) -> None:
    for i in range(n):
        append(factory, actor=f"user:u{i}", action="session.open", target=f"run-{i}",
               result="ok", tenant_id=1, detail="é")  # fmt: skip


@pytest.mark.parametrize(
    ("tamper", "why"),
    [
        ("UPDATE audit_events SET actor = 'user:mallory' WHERE seq = 2", "do not match"),
        ("DELETE FROM audit_events WHERE seq = 2", "rows missing"),
        ("UPDATE audit_events SET seq = 99 WHERE seq = 2", "rows missing"),
    ],
)
def test_the_audit_chain_verifies_and_breaks_where_it_was_changed(
    store: tuple[Any, Any], tamper: str, why: str
) -> None:
    engine, factory = store
    _events(factory, 4)
    with factory() as db:
        count, problems = verify(db)
    assert (count, problems) == (4, [])
    with engine.begin() as conn:
        conn.execute(text(tamper))
    with factory() as db:
        _, problems = verify(db)
    assert problems and any(why in p.why for p in problems), problems


def test_a_recomputed_row_still_breaks_the_chain_after_it(store: tuple[Any, Any]) -> None:
    """Rewriting a row with a digest that matches its new fields does not help: the next
    row chains onto the old digest."""
    import sealtrace.server._audit as audit

    _, factory = store
    _events(factory, 3)
    with factory() as db:
        row = db.get(AuditEvent, 2)
        assert row is not None
        row.result = "denied"
        row.digest = audit._digest(row.previous, row)
        db.commit()
        _, problems = verify(db)
    assert [p.seq for p in problems] == [3]


def test_passwords_are_argon2id_and_verify_only_themselves() -> None:
    stored = hash_password("correct horse")
    assert stored.startswith("$argon2id$")
    assert verify_password(stored, "correct horse")
    assert not verify_password(stored, "correct horse ")
    assert not verify_password("not a hash", "correct horse")


def test_tokens_resolve_to_their_scope_and_nothing_else(store: tuple[Any, Any]) -> None:
    _, factory = store
    with factory() as db:
        tenant = Tenant(name="acme")
        db.add(tenant)
        db.flush()
        alice = User(tenant_id=tenant.id, name="alice", role=Role.AUDITOR,
                     password_hash=hash_password("pw"))  # fmt: skip
        db.add(alice)
        db.flush()
        user_token = issue_token(db, KEY, tenant_id=tenant.id, scope=Scope.USER, name="login",
                                 user=alice)  # fmt: skip
        record_token = issue_token(db, KEY, tenant_id=tenant.id, scope=Scope.RECORD, name="prod")
        expired = issue_token(db, KEY, tenant_id=tenant.id, scope=Scope.RECORD, name="old",
                              lifetime=dt.timedelta(seconds=-1))  # fmt: skip
        db.commit()
        who = resolve_token(db, KEY, user_token)
        assert who is not None and who.role is Role.AUDITOR and who.user_name == "alice"
        assert who.permissions == PERMISSIONS[Role.AUDITOR]
        assert "sessions:open" not in who.permissions  # the role table says auditors don't
        recorder = resolve_token(db, KEY, record_token)
        assert recorder is not None and recorder.permissions == {"keys:lease", "runs:register"}
        secret = record_token.split("_", 2)[2]
        for bad in (record_token[:-1] + "x", expired, "st_nothing_here", "bearer", "",
                    record_token.replace("st_", "xx_")):  # fmt: skip
            assert resolve_token(db, KEY, bad) is None, bad
        assert resolve_token(db, b"other key" * 4, record_token) is None
        # Revoked: gone at once.
        token_id = record_token.split("_")[1]
        db.execute(update(ApiToken).where(ApiToken.id == token_id)
                   .values(revoked=dt.datetime.now(dt.UTC)))  # fmt: skip
        db.commit()
        assert resolve_token(db, KEY, record_token) is None
        # Only a keyed digest of the secret is stored.
        stored = [bytes(d) for d in db.scalars(select(ApiToken.secret_digest))]
        assert all(secret.encode() not in d for d in stored) and len(stored) == 3
