"""The server's database on SQLite and PostgreSQL: migrations, the audit chain, passwords and
tokens.

- the migrations build exactly the tables the models describe;
- the audit log verifies whole, and a changed field, a removed row, a reordered pair and a
  forged row each break it (the negative controls); so does a rewritten row whose digests
  are recomputed after it, unless the writer holds the audit key (the control that the key
  is what stops it); a tenant's verification checks and counts its own chain only;
- migration 0002 re-chains an 0001 log per tenant, which verifies once a MACed row heads
  each chain;
- passwords are argon2id and verify only themselves; a token resolves to its scope and
  role, and a wrong secret, an expired or revoked token, or a malformed one resolves to
  nothing; the database holds no token secret.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine, insert, select, text, update

from sealtrace.server._audit import _mac_message, append, verify
from sealtrace.server._audit_key import LocalAuditKey
from sealtrace.server._auth import (
    PERMISSIONS,
    hash_password,
    issue_token,
    resolve_token,
    verify_password,
)
from sealtrace.server._models import ApiToken, AuditEvent, Base, Role, Scope, Tenant, User

from ._audit_attack import rechain_after_rewrite

KEY = b"k" * 32
AUDIT = LocalAuditKey(b"the audit key")


def test_migrations_build_the_models_tables(database_url: str) -> None:
    engine = create_engine(database_url)
    found = MetaData()
    found.reflect(engine)
    engine.dispose()
    tables = set(found.tables) - {"alembic_version"}
    assert tables == set(Base.metadata.tables)
    for name, table in Base.metadata.tables.items():
        assert {c.name for c in found.tables[name].columns} == {c.name for c in table.columns}


def _events(factory: Any, n: int, tenant_id: int | None = 1) -> None:
    for i in range(n):
        append(factory, AUDIT, actor=f"user:u{i}", action="session.open", target=f"run-{i}",
               result="ok", tenant_id=tenant_id, detail="é")  # fmt: skip


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
        verdict = verify(db, AUDIT)
    assert (verdict.rows, verdict.problems) == (4, [])
    with engine.begin() as conn:
        conn.execute(text(tamper))
    with factory() as db:
        problems = verify(db, AUDIT).problems
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
        problems = verify(db, AUDIT).problems
    assert [p.seq for p in problems] == [3]


def test_a_rewrite_with_every_digest_recomputed_needs_the_audit_key(
    store: tuple[Any, Any],
) -> None:
    """Issue 21, finding 8: the digests are public arithmetic, so a database writer can
    rewrite a row and recompute every digest after it; only the head's MAC, which needs the
    audit key, gives it away."""
    _, factory = store
    _events(factory, 4)
    with factory() as db:
        assert verify(db, AUDIT).whole  # control: untouched, whole
    rechain_after_rewrite(factory, 2, actor="user:mallory")
    with factory() as db:
        problems = verify(db, AUDIT).problems
        assert [(p.seq, "MAC" in p.why) for p in problems] == [(4, True)]
        # Control: the same rewrite by someone holding the key (re-MACing the head) passes,
        # so it is the key, not the digests, that stops the forger.
        head = db.get(AuditEvent, 4)
        assert head is not None
        head.mac = AUDIT.mac(_mac_message(head))
        db.commit()
        assert verify(db, AUDIT).whole
        assert not verify(db, LocalAuditKey(b"another key")).whole


def test_a_tenant_verifies_and_counts_its_own_chain(store: tuple[Any, Any]) -> None:
    engine, factory = store
    _events(factory, 3, tenant_id=1)
    _events(factory, 2, tenant_id=2)
    _events(factory, 1, tenant_id=None)
    with factory() as db:
        mine, theirs, everyone = (verify(db, AUDIT, tenant_id=t) for t in (1, 2, None))
    assert [(v.rows, v.whole) for v in (mine, theirs, everyone)] == [
        (3, True),
        (2, True),
        (6, True),
    ]
    assert [h.chain for h in everyone.heads] == ["tenant:1", "tenant:2", "platform"]
    # Tenant 2's last row deleted and tenant 1's middle row moved into tenant 2's chain:
    # tenant 1 sees its own gap, tenant 2 is told of the foreign row, the operator of both.
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_events WHERE seq = 5"))
        conn.execute(text("UPDATE audit_events SET chain = 'tenant:2', chain_seq = 2 "
                          "WHERE seq = 2"))  # fmt: skip
    with factory() as db:
        mine, theirs, everyone = (verify(db, AUDIT, tenant_id=t) for t in (1, 2, None))
    assert mine.rows == 2 and any("rows missing" in p.why for p in mine.problems)
    assert any("another tenant" in p.why for p in theirs.problems)
    assert {p.seq for p in everyone.problems} >= {2, 3, 6}


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


def test_migration_0002_rechains_an_old_log_per_tenant(tmp_path: Any) -> None:
    """An 0001 log (one unkeyed chain) is re-chained per tenant; it is not whole until a
    MACed row heads each chain, since nothing vouched for it before."""
    import hashlib
    import json

    from sealtrace.server._db import connect, migrate

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate(url, "0001")
    engine, factory = connect(url)
    previous = bytes(32)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    with engine.begin() as conn:
        for seq, tenant in enumerate((1, 2, 1, None), start=1):
            fields = [seq, at.isoformat(timespec="microseconds"), tenant, "user:u", "login",
                      "t", "ok", ""]  # fmt: skip
            body = json.dumps(fields, separators=(",", ":")).encode()
            digest = hashlib.sha256(previous + body).digest()
            conn.execute(insert(AuditEvent).values(
                seq=seq, at=at, tenant_id=tenant, actor="user:u", action="login", target="t",
                result="ok", detail="", previous=previous, digest=digest,
            ))  # fmt: skip
            previous = digest
    migrate(url)
    with factory() as db:
        old = verify(db, AUDIT)
        assert old.rows == 4 and [h.chain_seq for h in old.heads] == [2, 1, 1]
        assert {p.why.split(" does not")[0] for p in old.problems} == {
            "the head of tenant:1", "the head of tenant:2", "the head of platform"
        }  # fmt: skip
    for tenant in (1, 2, None):
        _events(factory, 1, tenant_id=tenant)
    with factory() as db:
        assert verify(db, AUDIT).whole and verify(db, AUDIT).rows == 7
    engine.dispose()
