"""Sign-in over the v1 API (the real app, moto's KMS, SQLite and PostgreSQL).

- a login token carries an expiry, checked on every request: past it the token is refused;
  a lifetime of zero is refused in the settings and is an expired token, never an
  everlasting one;
- logging out revokes the token at once; the user's other tokens and other users' keep
  working; only a login token logs out.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sealtrace.server._auth import issue_token, resolve_token
from sealtrace.server._models import Scope
from sealtrace.server._settings import ServerSettings

from ._api import auth

ADA = {"tenant": "acme", "user": "ada", "password": "ada-pw"}


def test_logout_revokes_the_token_at_once(api: tuple[TestClient, dict[str, str]]) -> None:
    http, tokens = api
    second = http.post("/v1/auth/login", json=ADA).json()["token"]
    assert http.get("/v1/runs", headers=auth(tokens["ada"])).status_code == 200
    out = http.post("/v1/auth/logout", headers=auth(tokens["ada"]))
    assert out.status_code == 204, out.text
    assert http.get("/v1/runs", headers=auth(tokens["ada"])).status_code == 401
    assert http.post("/v1/auth/logout", headers=auth(tokens["ada"])).status_code == 401
    # Control: the same user's other login, and another user's, still work.
    assert http.get("/v1/runs", headers=auth(second)).status_code == 200
    assert http.get("/v1/runs", headers=auth(tokens["bob"])).status_code == 200
    # A recorder's token is not a login: revoking it is an administrator's act.
    assert http.post("/v1/auth/logout", headers=auth(tokens["record"])).status_code == 403
    assert http.post("/v1/keys/lease", json={"count": 1},
                     headers=auth(tokens["record"])).status_code == 200  # fmt: skip
    assert http.post("/v1/auth/logout").status_code == 401


def test_a_login_token_expires(api: tuple[TestClient, dict[str, str]]) -> None:
    http, _ = api
    services: Any = http.app.state.services  # type: ignore[attr-defined]
    services.settings.user_token_hours = 1.5 / 3600  # a second and a half
    login = http.post("/v1/auth/login", json=ADA).json()
    expires = dt.datetime.fromisoformat(login["expires"])
    assert dt.timedelta(0) < expires - dt.datetime.now(dt.UTC) <= dt.timedelta(seconds=1.5)
    assert http.get("/v1/runs", headers=auth(login["token"])).status_code == 200
    time.sleep(max(0.0, (expires - dt.datetime.now(dt.UTC)).total_seconds()) + 0.2)
    assert http.get("/v1/runs", headers=auth(login["token"])).status_code == 401


def test_a_zero_lifetime_is_no_lifetime(store: tuple[Any, Any], database_url: str) -> None:
    with pytest.raises(ValueError, match="user_token_hours"):
        ServerSettings(database_url=database_url, user_token_hours=0).check()
    _, factory = store
    from sealtrace.server._models import Tenant

    with factory() as db:
        tenant = Tenant(name="acme")
        db.add(tenant)
        db.flush()
        token = issue_token(db, b"k" * 32, tenant_id=tenant.id, scope=Scope.RECORD, name="x",
                            lifetime=dt.timedelta(0))  # fmt: skip
        db.commit()
        assert resolve_token(db, b"k" * 32, token) is None
