"""The v1 API (FastAPI's TestClient, the real app, moto's KMS, SQLite and PostgreSQL).

- OpenAPI names the permission of every operation;
- sign-in gives a user token; a wrong password is 401 and an audit event;
- a `record` token leases keys and registers and finishes runs, and reads nothing back;
  another record token of the same tenant can neither register nor finish them (404);
- a user of another tenant gets 404 for a run, and an empty list;
- the auditor reads runs and the audit log; the audit chain verifies through the API and
  the CLI, and the CLI exits 3 once a row is changed;
- the database holds no token secret and no password.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import func, select, text

from sealtrace.server._auth import issue_token
from sealtrace.server._models import AuditEvent, Scope, Tenant

from ._api import SECRET, auth, recorded_run
from ._audit_attack import rechain_after_rewrite


def _cli_env(database_url: str, audit_key_id: str) -> dict[str, str]:
    return {**os.environ, "SEALTRACE_SERVER_DATABASE_URL": database_url,
            "SEALTRACE_SERVER_SECRET_KEY": SECRET,
            "SEALTRACE_SERVER_AUDIT_KEY_ID": audit_key_id}  # fmt: skip


def test_openapi_names_the_permission_of_every_operation(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, _ = api
    paths = http.get("/openapi.json").json()["paths"]
    operations = [(p, m, op) for p, ops in paths.items() for m, op in ops.items()]
    assert len(operations) >= 8
    missing = [(p, m) for p, m, op in operations if not {"x-permission", "x-granted-to"} <= set(op)]
    assert not missing
    # Who holds each permission is the role table's answer, not a copy of it.
    assert paths["/v1/sessions"]["post"]["x-granted-to"] == ["admin", "oncall", "security"]
    assert paths["/v1/audit"]["get"]["x-granted-to"] == ["admin", "auditor"]
    assert paths["/v1/keys/lease"]["post"]["x-granted-to"] == ["record token"]


def test_sign_in_and_its_refusal(api: tuple[TestClient, dict[str, str]]) -> None:
    http, tokens = api
    wrong = http.post("/v1/auth/login", json={"tenant": "acme", "user": "ada", "password": "no"})
    assert wrong.status_code == 401
    assert http.get("/v1/runs").status_code == 401
    assert http.get("/v1/runs", headers=auth(tokens["ada"] + "x")).status_code == 401
    log = http.get("/v1/audit", headers=auth(tokens["aud"])).json()
    assert any(e["action"] == "login" and e["result"] == "denied" for e in log)


def test_a_record_token_records_and_reads_nothing_back(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    run_id = recorded_run(http, tokens["record"])
    for path in ("/v1/runs", f"/v1/runs/{run_id}", "/v1/audit", "/v1/audit/verify"):
        assert http.get(path, headers=auth(tokens["record"])).status_code == 403, path
    # Control: a person of the tenant sees the run.
    seen = http.get(f"/v1/runs/{run_id}", headers=auth(tokens["ada"]))
    assert seen.status_code == 200 and seen.json()["service"] == "checkout"
    # And a person cannot lease keys or register runs.
    assert http.post("/v1/keys/lease", json={}, headers=auth(tokens["ada"])).status_code == 403


def test_a_run_is_registered_and_finished_under_its_lease_only(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    http, tokens = api
    _, factory = store
    with factory() as db:
        tenant = db.scalars(select(Tenant).where(Tenant.name == "acme")).one()
        other = issue_token(db, SECRET.encode(), tenant_id=tenant.id, scope=Scope.RECORD,
                            name="staging")  # fmt: skip
        db.commit()
    run_id = http.post("/v1/keys/lease", json={"count": 1},
                       headers=auth(tokens["record"])).json()[0]["run_id"]  # fmt: skip
    body = {"wrapped_recording_key": base64.urlsafe_b64encode(bytes(80)).decode(),
            "store": "s3://bucket/elsewhere", "service": "forged", "host": "h"}  # fmt: skip
    finish = {"status": "failed"}
    assert http.post(f"/v1/runs/{run_id}/register", json=body,
                     headers=auth(other)).status_code == 404  # fmt: skip
    assert http.post(f"/v1/runs/{run_id}/finish", json=finish,
                     headers=auth(other)).status_code == 404  # fmt: skip
    # Control: the leasing token registers it; the other still cannot finish it.
    body["service"] = "checkout"
    assert http.post(f"/v1/runs/{run_id}/register", json=body,
                     headers=auth(tokens["record"])).status_code == 200  # fmt: skip
    assert http.post(f"/v1/runs/{run_id}/finish", json=finish,
                     headers=auth(other)).status_code == 404  # fmt: skip
    # A request count that is no count is refused; the recorder's count is kept.
    assert http.post(f"/v1/runs/{run_id}/finish", json={"status": "complete", "requests": -1},
                     headers=auth(tokens["record"])).status_code == 422  # fmt: skip
    done = http.post(f"/v1/runs/{run_id}/finish", json={"status": "complete", "requests": 7},
                     headers=auth(tokens["record"]))  # fmt: skip
    assert done.status_code == 200 and done.json()["service"] == "checkout"
    assert done.json()["requests"] == 7
    seen = http.get(f"/v1/runs/{run_id}", headers=auth(tokens["ada"])).json()
    assert seen["requests"] == 7


def test_another_tenant_gets_404(api: tuple[TestClient, dict[str, str]]) -> None:
    http, tokens = api
    run_id = recorded_run(http, tokens["record"])
    assert http.get(f"/v1/runs/{run_id}", headers=auth(tokens["gil"])).status_code == 404
    assert http.get("/v1/runs/run-nope", headers=auth(tokens["gil"])).status_code == 404
    assert http.get("/v1/runs", headers=auth(tokens["gil"])).json() == []
    assert [r["run_id"] for r in http.get("/v1/runs", headers=auth(tokens["ada"])).json()] == [
        run_id
    ]


def test_the_audit_chain_through_the_api_and_the_cli(
    api: tuple[TestClient, dict[str, str]],
    database_url: str,
    store: tuple[Any, Any],
    audit_key_id: str,
) -> None:
    http, tokens = api
    recorded_run(http, tokens["record"])
    chain = http.get("/v1/audit/verify", headers=auth(tokens["aud"])).json()
    assert chain["whole"] and chain["rows"] == 6 and chain["head"]  # acme's rows only
    actions = [e["action"] for e in http.get("/v1/audit", headers=auth(tokens["aud"])).json()]
    assert {"login", "keys.lease", "run.register", "run.finish"} <= set(actions)
    env = _cli_env(database_url, audit_key_id)
    cli = [str(Path(sys.executable).with_name("sealtrace")), "server", "audit-verify"]
    ok = subprocess.run(cli, env=env, capture_output=True, timeout=60, check=False)
    assert ok.returncode == 0 and b"whole" in ok.stdout, ok.stderr
    engine, _ = store
    with engine.begin() as conn:
        conn.execute(text("UPDATE audit_events SET result = 'ok' WHERE result = 'denied'"))
        conn.execute(text("UPDATE audit_events SET actor = 'user:mallory' WHERE seq = 2"))
    broken = subprocess.run(cli, env=env, capture_output=True, timeout=60, check=False)
    assert broken.returncode == 3 and b"row 2" in broken.stdout, broken.stdout


def test_a_rewritten_and_rechained_log_is_not_whole(
    api: tuple[TestClient, dict[str, str]],
    database_url: str,
    store: tuple[Any, Any],
    audit_key_id: str,
) -> None:
    """Issue 21, finding 8: rewriting a row and recomputing every digest after it must not
    verify as whole, through the API or the command line."""
    http, tokens = api
    recorded_run(http, tokens["record"])
    env = _cli_env(database_url, audit_key_id)
    cli = [str(Path(sys.executable).with_name("sealtrace")), "server", "audit-verify"]
    # Control: untouched, the chain is whole both ways.
    chain = http.get("/v1/audit/verify", headers=auth(tokens["aud"])).json()
    untouched = subprocess.run(cli, env=env, capture_output=True, timeout=60, check=False)
    assert (chain["whole"], untouched.returncode) == (True, 0), (chain, untouched.stdout)
    _, factory = store
    rechain_after_rewrite(factory, 2, actor="user:mallory")  # a sign-in, in acme's chain
    chain = http.get("/v1/audit/verify", headers=auth(tokens["aud"])).json()
    forged = subprocess.run(cli, env=env, capture_output=True, timeout=60, check=False)
    assert (chain["whole"], forged.returncode) == (False, 3), (chain, forged.stdout)
    assert b"BROKEN" in forged.stdout
    assert any("MAC" in p for p in chain["problems"]), chain


def test_an_auditor_verifies_and_counts_only_the_tenants_chain(
    api: tuple[TestClient, dict[str, str]],
    database_url: str,
    store: tuple[Any, Any],
    audit_key_id: str,
) -> None:
    http, tokens = api
    recorded_run(http, tokens["record"])
    _, factory = store
    with factory() as db:
        acme = db.scalars(select(Tenant.id).where(Tenant.name == "acme")).one()
        mine = db.scalar(select(func.count()).where(AuditEvent.tenant_id == acme))
        everyone = db.scalar(select(func.count()).select_from(AuditEvent))
        gil_login = db.scalars(select(AuditEvent.seq).where(AuditEvent.actor == "user:gil")).one()
    chain = http.get("/v1/audit/verify", headers=auth(tokens["aud"])).json()
    assert chain["whole"] and chain["rows"] == mine == chain["head_seq"] and mine < everyone
    # Globex's chain forged: acme's auditor neither sees it nor is told about it; the
    # operator's check, over every chain, finds it.
    rechain_after_rewrite(factory, gil_login, actor="user:mallory")
    assert http.get("/v1/audit/verify", headers=auth(tokens["aud"])).json() == chain
    cli = [str(Path(sys.executable).with_name("sealtrace")), "server", "audit-verify", "--json"]
    env = _cli_env(database_url, audit_key_id)
    broken = subprocess.run(cli, env=env, capture_output=True, timeout=60, check=False)
    verdict = json.loads(broken.stdout)
    assert broken.returncode == 3 and verdict["rows"] == everyone, verdict
    assert set(verdict["heads"]) == {f"tenant:{acme}", f"tenant:{acme + 1}"}
    assert any(f"row {gil_login}: the head of tenant:" in p for p in verdict["problems"])


def test_the_database_holds_no_token_secret_or_password(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    http, tokens = api
    recorded_run(http, tokens["record"])
    engine, _ = store
    dump = b""
    with engine.connect() as conn:
        for table in ("api_tokens", "users", "audit_events", "runs"):
            for row in conn.execute(text(f"SELECT * FROM {table}")):  # noqa: S608
                dump += repr(tuple(row)).encode()
    for token in tokens.values():
        assert token.split("_", 2)[2].encode() not in dump
    for name in ("ada", "aud", "gil"):
        assert f"{name}-pw".encode() not in dump
    assert b"argon2id" in dump  # control: the dump does hold the password hashes
