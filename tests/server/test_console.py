"""The console's security model through the real app and database (SQLite and PostgreSQL,
moto's KMS for the audit key): its cookie, its time-outs and sign-out, CSRF on every
state-changing request, its headers, the role table, and that its actions are the API's
audit events. The provenance pages themselves, with a real agent and sandbox, are walked in a
real Chromium by tests/e2e/test_console.py.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from sealtrace.server._console._headers import CSP
from sealtrace.server._console._sign_ins import COOKIE
from sealtrace.server._models import AuditEvent, ConsoleSignIn, PlatformSession

from ._api import auth, enroll_agent, recorded_run, serve_api
from ._console import csrf_of, sign_in

TEMPLATES = Path(__file__).resolve().parents[2] / "server" / "_console" / "templates"


@pytest.fixture
def api(
    database_url: str, store: tuple[Any, Any], kms: tuple[Any, str], audit_key_id: str
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The app, with console sign-ins that idle out after 2 s and end after 5 s."""
    _, factory = store
    yield from serve_api(database_url, factory, kms, audit_key_id=audit_key_id,
                         console_idle_timeout=2.0, console_absolute_timeout=5.0)  # fmt: skip


def _services(http: TestClient) -> Any:
    return http.app.state.services  # type: ignore[attr-defined]


def _events(http: TestClient, after: int = 0) -> list[tuple[str, str, str, str]]:
    with _services(http).factory() as db:
        rows = db.scalars(select(AuditEvent).where(AuditEvent.seq > after).order_by(AuditEvent.seq))
        return [(r.actor, r.action, r.target, r.result) for r in rows]


def _last(http: TestClient) -> int:
    with _services(http).factory() as db:
        found = db.scalars(select(AuditEvent.seq).order_by(AuditEvent.seq.desc())).first()
        return int(found or 0)


def _set_cookie(reply: Any) -> str:
    found = [v for k, v in reply.headers.multi_items() if k == "set-cookie" and COOKIE in v]
    assert len(found) == 1, reply.headers
    return str(found[0])


def test_signing_in_sets_a_strict_http_only_cookie_whose_secret_is_not_stored(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, _tokens = api
    form = http.get("/console/sign-in")
    done = http.post("/console/sign-in", data={"csrf": csrf_of(form.text), "tenant": "acme",
                                               "user": "ada", "password": "ada-pw"},
                     follow_redirects=False)  # fmt: skip
    assert done.status_code == 303 and done.headers["location"] == "/console/runs"
    header = _set_cookie(done)
    attributes = {part.strip().split("=")[0].lower() for part in header.split(";")}
    assert {"httponly", "path", "max-age"} <= attributes
    assert "samesite=strict" in header.lower() and "path=/console" in header.lower()
    assert "secure" not in attributes  # development on plain http: the setting says when
    value = header.split(";")[0].split("=", 1)[1].strip('"')
    prefix, sign_in_id, secret = value.split("_", 2)
    with _services(http).factory() as db:
        row = db.get(ConsoleSignIn, sign_in_id)
        assert row is not None and row.ended is None
        stored = b"".join(bytes(str(getattr(row, c.key)), "utf-8") + bytes(row.secret_digest)
                          for c in ConsoleSignIn.__table__.columns)  # fmt: skip
    assert prefix == "cs" and secret.encode() not in stored and secret not in str(stored)
    # The cookie is no API token: the API answers it 401, whatever header it comes in.
    assert http.get("/v1/runs", headers=auth(value)).status_code == 401


def test_cookies_are_secure_behind_tls(
    database_url: str, store: tuple[Any, Any], kms: tuple[Any, str]
) -> None:
    _, factory = store
    for plain, _tokens in serve_api(database_url, factory, kms, console_secure_cookies=True):
        http = TestClient(plain.app, base_url="https://testserver")  # behind TLS
        form = http.get("/console/sign-in")
        assert "secure" in form.headers["set-cookie"].lower()  # the sign-in form's own
        done = http.post("/console/sign-in", data={"csrf": csrf_of(form.text), "tenant": "acme",
                                                   "user": "ada", "password": "ada-pw"},
                         follow_redirects=False)  # fmt: skip
        assert "; secure" in _set_cookie(done).lower()
        # Over plain http the browser sends no Secure cookie back: the form is refused.
        form = plain.get("/console/sign-in")
        refused = plain.post("/console/sign-in", data={"csrf": csrf_of(form.text),
                                                       "tenant": "acme", "user": "ada",
                                                       "password": "ada-pw"})  # fmt: skip
        assert refused.status_code == 403


def test_a_new_sign_in_replaces_the_one_the_browser_held(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, _tokens = api
    sign_in(http, "ada")
    first = http.cookies[COOKIE]
    sign_in(http, "ada")
    second = http.cookies[COOKIE]
    assert first != second
    with _services(http).factory() as db:
        old = db.get(ConsoleSignIn, first.strip('"').split("_")[1])
        assert old is not None and old.ended_why == "replaced"
    http.cookies.clear()
    http.cookies.set(COOKIE, first, path="/console")
    back = http.get("/console/runs", follow_redirects=False)
    assert back.status_code == 303 and back.headers["location"].startswith("/console/sign-in")


def test_signing_out_ends_the_sign_in_on_the_server(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, _tokens = api
    csrf = sign_in(http, "ada")
    kept = http.cookies[COOKIE]
    mark = _last(http)
    out = http.post("/console/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and "why=signed" in out.headers["location"]
    assert _events(http, mark) == [("user:ada", "logout", "user:ada", "ok")]
    # The old cookie, replayed: nobody.
    http.cookies.clear()
    http.cookies.set(COOKIE, kept, path="/console")
    again = http.get("/console/runs", follow_redirects=False)
    assert again.status_code == 303 and "why=signed%20out" in again.headers["location"]
    page = http.get(again.headers["location"])
    assert "You are signed out" in page.text


def test_idle_and_absolute_time_outs_sign_out(api: tuple[TestClient, dict[str, str]]) -> None:
    http, _tokens = api
    sign_in(http, "ada")
    time.sleep(2.3)  # idle past 2 s
    idle = http.get("/console/runs", follow_redirects=False)
    assert idle.status_code == 303 and idle.headers["location"].endswith("why=idle")
    sign_in(http, "ada")
    kept = http.cookies[COOKIE]
    started = time.monotonic()
    while time.monotonic() - started < 5.5:  # active all along, yet past 5 s
        http.cookies.clear()  # the browser's copy would have gone at its Max-Age: the
        http.cookies.set(COOKIE, kept, path="/console")  # server must refuse it anyway
        reply = http.get("/console/runs", follow_redirects=False)
        if reply.status_code != 200:
            break
        time.sleep(0.5)
    assert reply.status_code == 303 and reply.headers["location"].endswith("why=expired")
    assert time.monotonic() - started >= 4.5  # control: it lasted until its time limit


def test_every_state_changing_request_needs_its_csrf_token(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    run_id = recorded_run(http, tokens["record"])
    csrf = sign_in(http, "ada")
    mark = _last(http)
    path = f"/console/runs/{run_id}/sessions"
    # A token one character off (never the token itself: one that ends in "0" was made into
    # itself once in 16 runs, and CI saw the post go through).
    changed = csrf[:-1] + ("1" if csrf[-1] == "0" else "0")
    for form in ({}, {"csrf": ""}, {"csrf": "0" * 64}, {"csrf": changed}):
        refused = http.post(path, data=form, follow_redirects=False)
        assert refused.status_code == 403, refused.text
    assert http.post("/console/sign-out", data={}).status_code == 403
    assert _events(http, mark) == []  # nothing was tried
    with _services(http).factory() as db:
        assert db.scalars(select(PlatformSession)).first() is None
    # The sign-in form is bound too: a post without the cookie its page set is refused.
    fresh = TestClient(http.app)
    refused = fresh.post("/console/sign-in", data={"csrf": csrf, "tenant": "acme", "user": "ada",
                                                   "password": "ada-pw"})  # fmt: skip
    assert refused.status_code == 403 and COOKIE not in refused.cookies
    # Control: with its token, the same post reaches the action (no agent: 503, audited).
    tried = http.post(path, data={"csrf": csrf}, follow_redirects=False)
    assert tried.status_code == 503, tried.text
    assert _events(http, mark)[-1][1:] == ("session.open", run_id, "failed")


def test_pages_carry_a_strict_policy_and_are_not_cached(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    recorded_run(http, tokens["record"])
    sign_in(http, "ada")
    for path in ("/console/sign-in", "/console/runs"):
        reply = http.get(path)
        assert reply.headers["content-security-policy"] == CSP
        assert "frame-ancestors 'none'" in CSP and "script-src 'self'" in CSP
        assert "'unsafe-inline'" not in CSP and "style-src 'self'" in CSP
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["cache-control"] == "no-store"
        # No inline script or style for the policy to forbid.
        assert not re.search(r"<script(?![^>]*\bsrc=)", reply.text)
        assert "<style" not in reply.text and " style=" not in reply.text
        assert not re.search(r"\son[a-z]+=", reply.text)
    static = http.get("/console/static/console.js")
    assert static.status_code == 200 and static.headers["content-type"].startswith(
        "text/javascript"
    )
    assert http.get("/console/static/../_pages.py").status_code == 404
    assert http.get("/console/static/nothing.js").status_code == 404
    # The API's own pages are not the console's: /docs keeps working.
    assert "content-security-policy" not in http.get("/health").headers


def test_templates_never_mark_recorded_text_safe() -> None:
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        for unsafe in ("|safe", "| safe", "autoescape false", "Markup", "|tojson"):
            assert unsafe not in text, f"{template.name}: {unsafe}"


def test_the_auditor_sees_no_session_button_and_its_post_is_refused_and_audited(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    run_id = recorded_run(http, tokens["record"])
    csrf = sign_in(http, "aud")
    page = http.get(f"/console/runs/{run_id}")
    assert page.status_code == 200 and run_id in page.text
    assert 'id="open-session"' not in page.text and 'id="no-session"' in page.text
    mark = _last(http)
    refused = http.post(f"/console/runs/{run_id}/sessions", data={"csrf": csrf})
    assert refused.status_code == 403
    assert _events(http, mark) == [
        ("user:aud", f"denied POST /console/runs/{run_id}/sessions", "sessions:open", "denied")
    ]
    # What an auditor may do: read the audit log and its chain's state.
    log = http.get("/console/audit")
    assert log.status_code == 200 and "The chain is whole" in log.text
    assert http.get("/console/admin").status_code == 403
    # Control: the on-call user sees the button.
    sign_in(http, "ada")
    assert 'id="open-session"' in http.get(f"/console/runs/{run_id}").text
    assert http.get("/console/audit").status_code == 403


def test_console_actions_are_the_apis_audit_events(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    """Signing in, opening a session and closing it leave the events the API's calls leave
    (same actor, action, target, result), and a session opened here is one the API sees."""
    http, tokens = api
    _services(http).keys.seal_for_agent = lambda *_args: b"sealed"
    enroll_agent(http, tokens["launcher"])
    run_id = recorded_run(http, tokens["record"])
    mark = _last(http)
    csrf = sign_in(http, "ada")
    opened = http.post(f"/console/runs/{run_id}/sessions", data={"csrf": csrf},
                       follow_redirects=False)  # fmt: skip
    assert opened.status_code == 303
    session_id = opened.headers["location"].rsplit("/", 1)[1]
    page = http.get(opened.headers["location"])
    assert page.status_code == 200 and "Starting the replay" in page.text
    assert http.get(f"/console/sessions/{session_id}/status").json() == {"status": "assigned"}
    via_api = http.get(f"/v1/sessions/{session_id}", headers=auth(tokens["ada"]))
    assert via_api.status_code == 200 and via_api.json()["run_id"] == run_id
    closed = http.post(f"/console/sessions/{session_id}/close", data={"csrf": csrf},
                       follow_redirects=False)  # fmt: skip
    assert closed.status_code == 303 and closed.headers["location"] == f"/console/runs/{run_id}"
    assert _events(http, mark) == [
        ("user:ada", "login", "user:ada", "ok"),
        ("user:ada", "session.open", f"{run_id} {session_id}", "ok"),
        ("user:ada", "session.close", session_id, "ok"),
    ]
    # Another user of the tenant: not found, as the API says.
    sign_in(http, "bob")
    assert http.get(f"/console/sessions/{session_id}").status_code == 404


def test_a_wrong_password_is_refused_as_the_api_refuses_it(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, _tokens = api
    mark = _last(http)
    form = http.get("/console/sign-in")
    wrong = http.post("/console/sign-in", data={"csrf": csrf_of(form.text), "tenant": "acme",
                                                "user": "ada", "password": "nope"})  # fmt: skip
    assert wrong.status_code == 401 and "wrong tenant, user or password" in wrong.text
    assert COOKIE not in wrong.cookies
    assert _events(http, mark) == [("anonymous", "login", "acme/ada", "denied")]


def test_an_admin_manages_the_tenants_users_and_tokens(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    """Users and tokens, for admins only: a user added (its password shown once, and it
    signs in), a record token minted (shown once, and it leases keys) and revoked (and it
    leases nothing more); each change the command line's audit event, the admin its actor."""
    from sealtrace.server._auth import hash_password
    from sealtrace.server._models import Role, Tenant, User

    http, _tokens = api
    with _services(http).factory() as db:
        acme = db.scalars(select(Tenant).where(Tenant.name == "acme")).one()
        db.add(User(tenant_id=acme.id, name="root", role=Role.ADMIN,
                    password_hash=hash_password("root-pw")))  # fmt: skip
        db.commit()
    assert sign_in(http, "ada") and http.get("/console/admin").status_code == 403
    csrf = sign_in(http, "root")
    page = http.get("/console/admin")
    assert page.status_code == 200 and "aud" in page.text and "gil" not in page.text
    mark = _last(http)
    added = http.post("/console/admin/users", data={"csrf": csrf, "name": "sam",
                                                   "role": "security"})  # fmt: skip
    password = re.search(r'id="shown-secret">.*?<code class="wrap">([^<]+)</code>', added.text,
                         re.S)  # fmt: skip
    assert added.status_code == 200 and password is not None
    minted = http.post("/console/admin/tokens", data={"csrf": csrf, "scope": "record",
                                                     "name": "prod"})  # fmt: skip
    token = re.search(r"(st_[0-9a-f]+_[\w-]+)", minted.text)
    assert token is not None
    leased = http.post("/v1/keys/lease", json={"count": 1}, headers=auth(token.group(1)))
    assert leased.status_code == 200, leased.text
    token_id = token.group(1).split("_")[1]
    revoked = http.post("/console/admin/tokens/revoke", data={"csrf": csrf, "token": token_id},
                        follow_redirects=False)  # fmt: skip
    assert revoked.status_code == 303
    assert http.post("/v1/keys/lease", json={"count": 1},
                     headers=auth(token.group(1))).status_code == 401  # fmt: skip
    events = _events(http, mark)
    assert [e[1:] for e in events if e[0] == "user:root"] == [
        ("user.create", "user:sam (security)", "ok"),
        ("token.create", f"record-token:{token_id} (prod)", "ok"),
        ("token.revoke", f"record-token:{token_id} (prod)", "ok"),
    ]
    # The new user signs in with the password shown once.
    sign_in(http, "sam", password=password.group(1))
    # Another tenant's token cannot be revoked from here.
    csrf = sign_in(http, "root")
    refused = http.post("/console/admin/tokens/revoke", data={"csrf": csrf, "token": "nope"})
    assert refused.status_code == 404


def test_the_run_page_opens_a_session_on_a_process_the_run_forked(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    # The *Process* box: a forked process's path opens a session on it (as the API's
    # `process`), shown on the session's page and in the run's list of sessions; a path that
    # is not one is refused before an agent is assigned.
    http, tokens = api
    _services(http).keys.seal_for_agent = lambda *_args: b"sealed"
    enroll_agent(http, tokens["launcher"])
    run_id = recorded_run(http, tokens["record"])
    csrf = sign_in(http, "ada")
    assert 'name="process"' in http.get(f"/console/runs/{run_id}").text
    refused = http.post(f"/console/runs/{run_id}/sessions",
                        data={"csrf": csrf, "process": "1.x"})  # fmt: skip
    assert refused.status_code == 422 and "not a process" in refused.text
    assert _services(http).sessions.dispatcher.sent == []
    opened = http.post(f"/console/runs/{run_id}/sessions",
                       data={"csrf": csrf, "process": "1"}, follow_redirects=False)  # fmt: skip
    assert opened.status_code == 303
    session_id = opened.headers["location"].rsplit("/", 1)[1]
    assert 'id="session-process"' in http.get(opened.headers["location"]).text
    assert _services(http).sessions.dispatcher.sent[-1][1]["process"] == "1"
    via_api = http.get(f"/v1/sessions/{session_id}", headers=auth(tokens["ada"]))
    assert via_api.json()["process"] == "1"
    assert "process 1" in http.get(f"/console/runs/{run_id}").text
