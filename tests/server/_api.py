"""What the API tests share: the app on a migrated database with two tenants, their users,
a record token and a launcher token (the `api` fixture in conftest.py builds it), and the
calls a test makes to get a recorded run and an enrolled agent."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

from fastapi.testclient import TestClient

from sealtrace.server._app import create_app
from sealtrace.server._audit_key import KmsAuditKey
from sealtrace.server._auth import hash_password, issue_token
from sealtrace.server._key_service import KmsKeyWrapper
from sealtrace.server._models import Role, Scope, Tenant, User
from sealtrace.server._settings import ServerSettings

SECRET = "test-secret-key-" + "x" * 16


class QueueOfRecord:
    """The task queue, kept in a list: the assignments a session sent its agent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, queue: str, assignment: dict[str, Any]) -> None:
        self.sent.append((queue, assignment))


def serve_api(
    database_url: str,
    factory: Any,
    kms: tuple[Any, str],
    *,
    audit_key_id: str | None = None,
    **settings: Any,
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The app, two tenants, an oncall user (ada, bob) and an auditor (aud) in acme, an
    oncall user in globex (gil), and a record and a launcher token for acme; yields the
    client and {name: token}."""
    client, key_id = kms
    config = ServerSettings(database_url=database_url, secret_key=SECRET, mint_batch=4,
                            **settings)  # fmt: skip
    tokens: dict[str, str] = {}
    with factory() as db:
        acme, globex = Tenant(name="acme"), Tenant(name="globex")
        db.add_all([acme, globex])
        db.flush()
        for tenant, name, role in ((acme, "ada", Role.ONCALL), (acme, "bob", Role.ONCALL),
                                   (acme, "aud", Role.AUDITOR),
                                   (globex, "gil", Role.ONCALL)):  # fmt: skip
            db.add(User(tenant_id=tenant.id, name=name, role=role,
                        password_hash=hash_password(f"{name}-pw")))  # fmt: skip
        for scope in (Scope.RECORD, Scope.LAUNCHER):
            tokens[scope.value] = issue_token(db, SECRET.encode(), tenant_id=acme.id,
                                              scope=scope, name="prod")  # fmt: skip
        db.commit()
    # The audit chain's MAC key: KMS when the test made one, else the development key.
    audit = KmsAuditKey(client, audit_key_id) if audit_key_id else None
    app = create_app(config, wrapper=KmsKeyWrapper(client, key_id), dispatcher=QueueOfRecord(),
                     audit=audit)  # fmt: skip
    with TestClient(app) as http:
        for tenant, name in (("acme", "ada"), ("acme", "bob"), ("acme", "aud"),
                             ("globex", "gil")):  # fmt: skip
            login = {"tenant": tenant, "user": name, "password": f"{name}-pw"}
            got = http.post("/v1/auth/login", json=login)
            assert got.status_code == 200, got.text
            tokens[name] = got.json()["token"]
        yield http, tokens


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def recorded_run(http: TestClient, token: str) -> str:
    leased = http.post("/v1/keys/lease", json={"count": 2}, headers=auth(token))
    assert leased.status_code == 200, leased.text
    keys = leased.json()
    assert len(keys) == 2 and len(base64.urlsafe_b64decode(keys[0]["public_key"] + "=")) == 32
    run_id = keys[0]["run_id"]
    wrapped = base64.urlsafe_b64encode(bytes(80)).decode()
    body = {"wrapped_recording_key": wrapped, "store": f"s3://bucket/acme/{run_id}",
            "service": "checkout", "host": "web-1"}  # fmt: skip
    assert http.post(f"/v1/runs/{run_id}/register", json=body,
                     headers=auth(token)).status_code == 200  # fmt: skip
    done = http.post(f"/v1/runs/{run_id}/finish", json={"status": "complete", "exit_status": 0},
                     headers=auth(token))  # fmt: skip
    assert done.status_code == 200 and done.json()["status"] == "complete"
    return str(run_id)


def enroll_agent(
    http: TestClient, launcher: str, public_key: bytes | None = None
) -> tuple[str, str]:
    """An agent enrolled as a launcher starts one: an enrollment minted with `launcher`, then
    used with the agent's public key (random unless given). Its id and its own credential."""
    minted = http.post("/v1/agents/enrollments", headers=auth(launcher))
    assert minted.status_code == 201, minted.text
    key = public_key if public_key is not None else os.urandom(32)
    hello = {"public_key": base64.b64encode(key).decode()}
    enrolled = http.post("/v1/agents", json=hello, headers=auth(minted.json()["enrollment"]))
    assert enrolled.status_code == 201, enrolled.text
    return enrolled.json()["agent_id"], enrolled.json()["credential"]
