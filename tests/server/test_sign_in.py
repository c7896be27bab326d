"""Sign-in over the v1 API (the real app, moto's KMS, SQLite and PostgreSQL).

- a login token carries an expiry, checked on every request: past it the token is refused;
  a lifetime of zero is refused in the settings and is an expired token, never an
  everlasting one;
- logging out revokes the token at once; the user's other tokens and other users' keep
  working; only a login token logs out;
- signing in as an unknown user (or tenant) runs the same argon2 verification as a wrong
  password, and answers the same;
- failed sign-ins are limited per account and address (429 with Retry-After past the
  limit, audited), without locking the user out from elsewhere or other users out from
  the same address, until the window passes; one address spraying accounts meets its own
  limit; the limiter's memory stays bounded.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Literal

import pytest
from argon2 import PasswordHasher
from fastapi.testclient import TestClient

from sealtrace.server._auth import issue_token, resolve_token
from sealtrace.server._login_limit import LoginLimiter
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


class _CountingHasher(PasswordHasher):
    """argon2id as configured, counting the verifications it runs."""

    calls = 0

    def verify(self, hash: str | bytes, password: str | bytes) -> Literal[True]:
        type(self).calls += 1
        return super().verify(hash, password)


@pytest.mark.parametrize(
    "login",
    [
        {"tenant": "acme", "user": "ada", "password": "wrong"},  # a known user
        {"tenant": "acme", "user": "nobody", "password": "wrong"},
        {"tenant": "no-such-tenant", "user": "ada", "password": "wrong"},
    ],
)
def test_an_unknown_user_costs_what_a_wrong_password_does(
    api: tuple[TestClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch, login: dict[str, str]
) -> None:
    """The same argon2 verification runs whether the user exists or not, so the time of a
    refusal does not say which users exist (timing itself is too noisy to test)."""
    import sealtrace.server._auth as auth_module

    http, _ = api
    _CountingHasher.calls = 0
    monkeypatch.setattr(auth_module, "_HASHER", _CountingHasher())
    refused = http.post("/v1/auth/login", json=login)
    assert refused.status_code == 401
    assert refused.json() == {"detail": "wrong tenant, user or password"}
    assert _CountingHasher.calls == 1


def test_sign_in_is_rate_limited_per_account_and_address(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, _ = api
    services: Any = http.app.state.services  # type: ignore[attr-defined]
    now = [1000.0]
    services.logins = LoginLimiter(per_account=3, per_address=6, window=60.0,
                                   clock=lambda: now[0])  # fmt: skip
    wrong = {**ADA, "password": "wrong"}
    for _ in range(3):
        assert http.post("/v1/auth/login", json=wrong).status_code == 401
    # Past the limit even the right password waits, and is told for how long.
    limited = http.post("/v1/auth/login", json=ADA)
    assert limited.status_code == 429 and 0 < int(limited.headers["Retry-After"]) <= 60
    # Not a lockout of anyone else: another user from the same address, and ada from
    # another address, sign in.
    bob = {"tenant": "acme", "user": "bob", "password": "bob-pw"}
    assert http.post("/v1/auth/login", json=bob).status_code == 200
    elsewhere = TestClient(http.app, client=("192.0.2.7", 40000))
    assert elsewhere.post("/v1/auth/login", json=ADA).status_code == 200
    # Once the window has passed, ada signs in here again.
    now[0] += 61
    assert http.post("/v1/auth/login", json=ADA).status_code == 200
    # One address spraying many accounts meets the address's limit.
    for name in ("u1", "u2", "u3", "u4", "u5", "u6"):
        attempt = {"tenant": "acme", "user": name, "password": "x"}
        assert http.post("/v1/auth/login", json=attempt).status_code == 401
    assert http.post("/v1/auth/login", json=bob).status_code == 429
    assert elsewhere.post("/v1/auth/login", json=bob).status_code == 200
    auditor = {"tenant": "acme", "user": "aud", "password": "aud-pw"}
    token = elsewhere.post("/v1/auth/login", json=auditor).json()["token"]
    log = http.get("/v1/audit", headers=auth(token)).json()
    assert any("rate limited" in e["detail"] for e in log)


def test_the_limiter_stays_bounded() -> None:
    import sealtrace.server._login_limit as limit

    now = [0.0]
    limiter = LoginLimiter(per_account=2, per_address=4, window=10.0, clock=lambda: now[0])
    for i in range(50):
        limiter.failed("198.51.100.1", f"acme/u{i}")
        assert len(limiter._failures[("address", "198.51.100.1")]) <= 4
    now[0] += 11
    assert limiter.retry_after("198.51.100.1", "acme/u0") is None
    old, limit._MAX_KEYS = limit._MAX_KEYS, 10
    try:
        limiter.failed("198.51.100.2", "acme/x")
    finally:
        limit._MAX_KEYS = old
    assert len(limiter._failures) == 2
