"""Agents' identities over the v1 API and the command line (the real app, moto's KMS, SQLite
and PostgreSQL; the task queue is a list). Issue 21, finding 3: one tenant-wide agent token
let an attacker register a rogue agent, heartbeat it, be assigned the next session and take
its sealed key.

- the rogue-agent attack: an attacker holding what a leaked agent would hold (its used
  enrollment, the credential of an agent that is gone, the old tenant-wide agent token)
  enrolls nothing, heartbeats nothing, and the next session goes to the enrolled live agent,
  whose key alone opens its sealed key;
- an enrollment enrolls one agent once: a second use is refused (401, audited), and of
  concurrent uses exactly one wins; an expired one is refused; it is no bearer token for
  anything else; only its digest is stored; only an admin, a launcher token or the operator
  mints one, for their own tenant;
- an agent's credential acts as its own agent only (another agent id in the path is 403,
  audited), and dies with the agent: session closed, failed, never taken up, or the agent
  gone; an expired or revoked one is not honoured, and its agent is never assigned;
- another tenant's agent never gets this tenant's sessions;
- migration 0003 revokes the tenant-wide agent tokens and retires their agents.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, text, update

from sealtrace.agent._contracts import open_session_key
from sealtrace.proxy._errors import WrongIdentityError
from sealtrace.proxy.format import Recipient, generate_identity, wrap_recording_key
from sealtrace.server import EnrollmentRefused
from sealtrace.server._auth import hash_password, issue_token, resolve_token, secret_digest
from sealtrace.server._enrollment import Enrolled, enroll, mint
from sealtrace.server._models import (
    Agent,
    AgentEnrollment,
    ApiToken,
    PlatformSession,
    Role,
    Scope,
    Tenant,
    User,
)

from ._api import SECRET, auth, enroll_agent, recorded_run

KEY = SECRET.encode()


def _services(http: TestClient) -> Any:
    return http.app.state.services  # type: ignore[attr-defined]


def _tenant(factory: Any, name: str) -> int:
    with factory() as db:
        return int(db.scalars(select(Tenant.id).where(Tenant.name == name)).one())


def _token(factory: Any, tenant: str, scope: Scope) -> str:
    with factory() as db:
        made = issue_token(db, KEY, tenant_id=_tenant(factory, tenant), scope=scope, name="t")
        db.commit()
    return made


def _legacy_agent_token(factory: Any) -> str:
    """The tenant-wide agent token of before (an `agent` row that names no agent), as an old
    database still holds it: made as a record token, then given the agent scope."""
    token = _token(factory, "acme", Scope.RECORD)
    with factory() as db:
        db.execute(update(ApiToken).where(ApiToken.id == token.split("_")[1])
                   .values(scope=Scope.AGENT))  # fmt: skip
        db.commit()
    return token


def _admin(http: TestClient, factory: Any, tenant: str = "acme") -> str:
    name = f"adm-{tenant}"
    with factory() as db:
        db.add(User(tenant_id=_tenant(factory, tenant), name=name, role=Role.ADMIN,
                    password_hash=hash_password("adm-pw")))  # fmt: skip
        db.commit()
    got = http.post("/v1/auth/login", json={"tenant": tenant, "user": name, "password": "adm-pw"})
    assert got.status_code == 200, got.text
    return str(got.json()["token"])


def _mint(http: TestClient, token: str, **body: Any) -> str:
    minted = http.post("/v1/agents/enrollments", json=body, headers=auth(token))
    assert minted.status_code == 201, minted.text
    assert minted.json()["enrollment"].startswith("ste_")
    return str(minted.json()["enrollment"])


def _hello(public_key: bytes | None = None) -> dict[str, str]:
    return {"public_key": base64.b64encode(public_key or os.urandom(32)).decode()}


def _use(http: TestClient, enrollment: str, public_key: bytes | None = None) -> Any:
    return http.post("/v1/agents", json=_hello(public_key), headers=auth(enrollment))


def _beat(http: TestClient, credential: str, agent_id: str) -> int:
    return http.post(f"/v1/agents/{agent_id}/heartbeat", headers=auth(credential)).status_code


def _sealed_run(http: TestClient, record: str) -> tuple[str, bytes, bytes, str]:
    """A run whose registered header really wraps a recording key to the run's leased key:
    (run id, recording key, wrapped key, store)."""
    leased = http.post("/v1/keys/lease", json={"count": 1}, headers=auth(record))
    assert leased.status_code == 200, leased.text
    lease = leased.json()[0]
    run_id, public = lease["run_id"], lease["public_key"]
    raw = base64.urlsafe_b64decode(public + "=" * (-len(public) % 4))
    recording_key = os.urandom(32)
    wrapped = wrap_recording_key(recording_key, Recipient.from_raw(raw), run_id)
    store = f"s3://bucket/acme/{run_id}"
    body = {"wrapped_recording_key": base64.urlsafe_b64encode(wrapped).decode(),
            "store": store, "service": "checkout", "host": "web-1"}  # fmt: skip
    assert http.post(f"/v1/runs/{run_id}/register", json=body,
                     headers=auth(record)).status_code == 200  # fmt: skip
    done = http.post(f"/v1/runs/{run_id}/finish", json={"status": "complete"},
                     headers=auth(record))  # fmt: skip
    assert done.status_code == 200, done.text
    return run_id, recording_key, wrapped, store


def _open(http: TestClient, user: str, run_id: str) -> Any:
    return http.post("/v1/sessions", json={"run_id": run_id}, headers=auth(user))


def _audit(http: TestClient, tokens: dict[str, str]) -> list[dict[str, Any]]:
    got = http.get("/v1/audit?limit=1000", headers=auth(tokens["aud"]))
    assert got.status_code == 200, got.text
    return list(got.json())


# -- the attack --------------------------------------------------------------------------


def test_a_tenant_wide_agent_token_registers_no_agent_and_takes_no_session(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    """The attack as it was: the old tenant-wide agent token registers an agent, heartbeats
    it and is assigned the next session. Every step is refused now, and the session finds
    no agent to go to."""
    http, tokens = api
    _, factory = store
    _services(http).keys.seal_for_agent = lambda *_args: b"sealed"
    leaked = _legacy_agent_token(factory)
    rogue = http.post("/v1/agents", json=_hello(), headers=auth(leaked))
    assert rogue.status_code == 401, rogue.text
    assert http.post("/v1/agents/agent-0/heartbeat", headers=auth(leaked)).status_code == 401
    run_id = recorded_run(http, tokens["record"])
    opened = _open(http, tokens["ada"], run_id)
    assert opened.status_code == 503 and "no idle agent" in opened.text, opened.text
    assert _services(http).sessions.dispatcher.sent == []
    with factory() as db:
        assert db.scalar(select(func.count()).select_from(Agent)) == 0


def test_the_rogue_agent_attack_is_refused(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    """An attacker holding everything a leaked agent would (its used enrollment, the
    credential of an earlier agent that is gone, the old tenant-wide token) tries to enroll
    an agent of their own, heartbeat as one, and take the next session. The session goes to
    the enrolled live agent, and only that agent's key opens what it was sent."""
    http, tokens = api
    _, factory = store
    services = _services(http)
    run_id, recording_key, wrapped, where = _sealed_run(http, tokens["record"])
    # An earlier agent served a session and is gone; its credential leaked afterwards.
    earlier_id, earlier = enroll_agent(http, tokens["launcher"])
    first = _open(http, tokens["ada"], run_id)
    assert first.status_code == 201, first.text
    closed = http.post(f"/v1/sessions/{first.json()['session_id']}/close",
                       headers=auth(tokens["ada"]))  # fmt: skip
    assert closed.status_code == 200
    # The real agent: its enrollment is used (and leaked with its environment).
    agent = generate_identity()
    enrollment = _mint(http, tokens["launcher"])
    hello = _use(http, enrollment, agent.recipient.raw)
    assert hello.status_code == 201, hello.text
    agent_id, credential = hello.json()["agent_id"], hello.json()["credential"]
    # The attacker's agent, with a key pair of their own, and everything they hold.
    rogue = generate_identity()
    loot = {"used enrollment": enrollment, "dead agent's credential": earlier,
            "tenant-wide token": _legacy_agent_token(factory)}  # fmt: skip
    for what, stolen in loot.items():
        assert _use(http, stolen, rogue.recipient.raw).status_code == 401, what
        assert _beat(http, stolen, earlier_id) == 401, what
    # The live agent's credential (not leaked, but were it): it acts as its agent only.
    assert _use(http, credential, rogue.recipient.raw).status_code == 401
    with factory() as db:
        agents = db.scalars(select(Agent.id)).all()
        keys = db.scalars(select(Agent.public_key)).all()
    assert sorted(agents) == sorted([earlier_id, agent_id])
    assert rogue.recipient.raw not in keys
    # The next session: the real agent (heard from just now) gets it, and its key alone
    # opens the sealed recording key.
    assert _beat(http, credential, agent_id) == 204
    opened = _open(http, tokens["ada"], run_id)
    assert opened.status_code == 201, opened.text
    session_id = opened.json()["session_id"]
    queue, assignment = services.sessions.dispatcher.sent[-1]
    assert queue == f"sealtrace.agent.{agent_id}" and assignment["session_id"] == session_id
    sealed = base64.b64decode(assignment["sealed_key"])
    bound = {"session_id": session_id, "run_id": run_id, "store": where, "wrapped_key": wrapped}
    with open_session_key(sealed, agent, **bound) as opened_key:  # type: ignore[arg-type]
        assert bytes(opened_key.view()) == recording_key
    with pytest.raises(WrongIdentityError):
        open_session_key(sealed, rogue, **bound)  # type: ignore[arg-type]
    # Nor can the loot reach the session's traffic.
    for stolen in loot.values():
        for path in (f"/v1/agents/{agent_id}/sessions/{session_id}/next?wait=0",
                     f"/v1/agents/{earlier_id}/sessions/{session_id}/next?wait=0"):  # fmt: skip
            assert http.get(path, headers=auth(stolen)).status_code == 401
    log = _audit(http, tokens)
    refusals = [e for e in log if e["action"] == "agent.enroll" and e["result"] == "denied"]
    assert any("already used" in e["detail"] for e in refusals), refusals


# -- enrollments ------------------------------------------------------------------------


def test_an_enrollment_enrolls_one_agent_once(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any], database_url: str
) -> None:
    http, tokens = api
    engine, factory = store
    enrollment = _mint(http, tokens["launcher"])
    first = _use(http, enrollment)
    assert first.status_code == 201, first.text
    found = first.json()
    assert found["queue"] == f"sealtrace.agent.{found['agent_id']}"
    # The credential stands for that agent and nothing more.
    with factory() as db:
        who = resolve_token(db, KEY, found["credential"])
    assert who is not None and who.agent_id == found["agent_id"] and who.scope is Scope.AGENT
    assert who.permissions == {"agents:serve"}
    # A second use, with another key pair or the same, is refused the same way.
    for again in (_use(http, enrollment), _use(http, enrollment)):
        assert again.status_code == 401, again.text
        assert again.json()["detail"].startswith("not a valid enrollment credential")
    with factory() as db:
        assert db.scalar(select(func.count()).select_from(Agent)) == 1
        row = db.scalars(select(AgentEnrollment)).one()
        assert row.used is not None and row.agent_id == found["agent_id"]
    # Not a bearer token for anything else, nor malformed or unknown ones an enrollment.
    assert http.get("/v1/runs", headers=auth(enrollment)).status_code == 401
    for bogus in (enrollment[:-2] + "xx", "ste_0000_nothing", "st_x_y", "", enrollment + "_"):
        assert _use(http, bogus).status_code == 401, bogus
    assert http.post("/v1/agents", json=_hello()).status_code == 401  # none presented
    # A malformed public key is a 422 that does not burn a fresh enrollment.
    fresh = _mint(http, tokens["launcher"])
    bad = http.post("/v1/agents", json={"public_key": "AAAA"}, headers=auth(fresh))
    assert bad.status_code == 422, bad.text
    assert _use(http, fresh).status_code == 201
    # Minted, used and refused reuse are audit events; no secret is in the log or the
    # database (only digests).
    log = _audit(http, tokens)
    actions = [(e["action"], e["result"]) for e in log]
    assert actions.count(("agent.enrollment.mint", "ok")) == 2
    assert actions.count(("agent.enroll", "ok")) == 2
    reuse = [e for e in log if e["action"] == "agent.enroll" and e["result"] == "denied"]
    assert [e["detail"] for e in reuse[:2]] == [f"already used (by {found['agent_id']})"] * 2
    dump = str(_dump(engine)).encode() + str(log).encode()
    for secret in (enrollment.split("_", 2)[2], found["credential"].split("_", 2)[2]):
        assert secret.encode() not in dump


def _dump(engine: Any) -> list[Any]:
    with engine.connect() as conn:
        return [row for table in ("agent_enrollments", "api_tokens", "agents", "audit_events")
                for row in conn.execute(text(f"SELECT * FROM {table}"))]  # noqa: S608  # fmt: skip


@pytest.mark.parametrize("presenters", [8])
def test_concurrent_uses_of_one_enrollment_enroll_exactly_one_agent(
    store: tuple[Any, Any], presenters: int
) -> None:
    _, factory = store
    with factory() as db:
        tenant = Tenant(name="acme")
        db.add(tenant)
        db.flush()
        made = mint(db, KEY, tenant_id=tenant.id, minted_by="test")
        db.commit()
    start = threading.Barrier(presenters)
    outcomes: list[object] = []

    def present() -> None:
        start.wait()
        try:
            outcomes.append(enroll(factory, KEY, made.credential, os.urandom(32),
                                   lifetime=dt.timedelta(hours=1)))  # fmt: skip
        except EnrollmentRefused as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=present) for _ in range(presenters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [o for o in outcomes if isinstance(o, Enrolled)]
    refused = [o for o in outcomes if isinstance(o, EnrollmentRefused)]
    assert len(outcomes) == presenters and len(winners) == 1, outcomes
    assert all("already used" in str(o) for o in refused), refused
    with factory() as db:
        assert db.scalars(select(Agent.id)).all() == [winners[0].agent_id]
        assert db.scalars(select(ApiToken.agent_id)).all() == [winners[0].agent_id]


def test_an_expired_enrollment_is_refused(api: tuple[TestClient, dict[str, str]]) -> None:
    http, tokens = api
    short = _mint(http, tokens["launcher"], ttl=0.5)
    time.sleep(0.7)
    assert _use(http, short).status_code == 401
    log = _audit(http, tokens)
    assert [e["detail"] for e in log if e["action"] == "agent.enroll"] == ["expired"]
    # Control: one as young, used at once, works; lifetimes are bounded.
    assert _use(http, _mint(http, tokens["launcher"], ttl=0.5)).status_code == 201
    for ttl in (0, -1, 86401):
        got = http.post("/v1/agents/enrollments", json={"ttl": ttl},
                        headers=auth(tokens["launcher"]))  # fmt: skip
        assert got.status_code == 422, ttl


def test_only_admins_launchers_and_the_operator_mint_enrollments(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    http, tokens = api
    _, factory = store
    _, credential = enroll_agent(http, tokens["launcher"])
    for who in ("ada", "aud", "record", "gil"):
        assert http.post("/v1/agents/enrollments", headers=auth(tokens[who])).status_code == 403
    assert http.post("/v1/agents/enrollments", headers=auth(credential)).status_code == 403
    # An admin mints for their own tenant, as a launcher token does.
    admin = _admin(http, factory)
    enrolled = _use(http, _mint(http, admin))
    assert enrolled.status_code == 201
    with factory() as db:
        agent = db.get(Agent, enrolled.json()["agent_id"])
        assert agent is not None and agent.tenant_id == _tenant(factory, "acme")
    paths = http.get("/openapi.json").json()["paths"]
    mint_op = paths["/v1/agents/enrollments"]["post"]
    assert (mint_op["x-permission"], mint_op["x-granted-to"]) == (
        "agents:enroll", ["admin", "launcher token"]
    )  # fmt: skip
    assert paths["/v1/agents/{agent_id}/heartbeat"]["post"]["x-granted-to"] == ["agent token"]


def test_another_tenants_agent_gets_none_of_this_tenants_sessions(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    http, tokens = api
    _, factory = store
    _services(http).keys.seal_for_agent = lambda *_args: b"sealed"
    globex_id, globex = enroll_agent(http, _token(factory, "globex", Scope.LAUNCHER))
    with factory() as db:
        agent = db.get(Agent, globex_id)
        assert agent is not None and agent.tenant_id == _tenant(factory, "globex")
    run_id = recorded_run(http, tokens["record"])
    assert _beat(http, globex, globex_id) == 204
    assert _open(http, tokens["ada"], run_id).status_code == 503  # acme has no agent
    acme_id, acme = enroll_agent(http, tokens["launcher"])
    # Neither credential acts as the other tenant's agent.
    assert _beat(http, globex, acme_id) == 403
    assert _beat(http, acme, globex_id) == 403
    opened = _open(http, tokens["ada"], run_id)
    assert opened.status_code == 201
    assert _services(http).sessions.dispatcher.sent[-1][0] == f"sealtrace.agent.{acme_id}"


# -- an agent's credential ----------------------------------------------------------------


def test_an_agent_credential_acts_as_its_own_agent_only(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    _services(http).keys.seal_for_agent = lambda *_args: b"sealed"
    mine_id, mine = enroll_agent(http, tokens["launcher"])
    run_id = recorded_run(http, tokens["record"])
    session_id = _open(http, tokens["ada"], run_id).json()["session_id"]  # to `mine`
    other_id, other = enroll_agent(http, tokens["launcher"])
    base = f"/v1/agents/{mine_id}/sessions/{session_id}"
    tries = [
        http.post(f"/v1/agents/{mine_id}/heartbeat", headers=auth(other)),
        http.post(f"{base}/state", json={"state": "ready"}, headers=auth(other)),
        http.get(f"{base}/next?wait=0", headers=auth(other)),
        http.post(f"{base}/answers/1", json={"error": "x", "status": 409}, headers=auth(other)),
    ]
    assert [t.status_code for t in tries] == [403] * 4, [t.text for t in tries]
    # Its own id in the path reaches nothing of the other's session either.
    own = http.get(f"/v1/agents/{other_id}/sessions/{session_id}/next?wait=0",
                   headers=auth(other))  # fmt: skip
    assert own.status_code == 404
    log = _audit(http, tokens)
    denied = [e for e in log if e["result"] == "denied" and e["actor"] == f"agent:{other_id}"]
    assert len(denied) == 4 and {e["target"] for e in denied} == {f"agent:{mine_id}"}
    # Control: the assigned agent moves its own session.
    ready = http.post(f"{base}/state", json={"state": "ready"}, headers=auth(mine))
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert _beat(http, other, other_id) == 204


def _credential_is_dead(http: TestClient, credential: str, agent_id: str) -> bool:
    return _beat(http, credential, agent_id) == 401


@pytest.mark.parametrize("end", ["user closes", "agent closes", "agent fails", "server gives up",
                                 "never taken up", "agent left"])  # fmt: skip
def test_an_agent_credential_dies_with_its_agent(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any], end: str
) -> None:
    http, tokens = api
    _, factory = store
    services = _services(http)
    services.keys.seal_for_agent = lambda *_args: b"sealed"
    agent_id, credential = enroll_agent(http, tokens["launcher"])
    acme = _tenant(factory, "acme")
    if end == "agent left":
        services.sessions.agent_left(acme, agent_id)
    else:
        run_id = recorded_run(http, tokens["record"])
        session_id = _open(http, tokens["ada"], run_id).json()["session_id"]
        state = f"/v1/agents/{agent_id}/sessions/{session_id}/state"
        if end != "never taken up":
            assert http.post(state, json={"state": "ready"},
                             headers=auth(credential)).status_code == 200  # fmt: skip
        if end == "user closes":
            http.post(f"/v1/sessions/{session_id}/close", headers=auth(tokens["ada"]))
        elif end in ("agent closes", "agent fails"):
            report = {"state": "closed" if end == "agent closes" else "failed"}
            assert http.post(state, json=report, headers=auth(credential)).status_code == 200
        elif end == "server gives up":  # the agent went silent with a question waiting
            services.sessions.fail(acme, session_id, "the agent stopped answering")
        else:  # the assignment timed out: the session fails when next looked at
            services.sessions.assign_timeout = dt.timedelta(0)
            got = http.get(f"/v1/sessions/{session_id}", headers=auth(tokens["ada"]))
            assert got.json()["status"] == "failed", got.text
    assert _credential_is_dead(http, credential, agent_id)
    with factory() as db:
        agent = db.get(Agent, agent_id)
        assert agent is not None and agent.status == "gone"


def test_only_an_enrolled_live_agent_with_a_valid_credential_is_assigned(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    http, tokens = api
    _, factory = store
    services = _services(http)
    services.keys.seal_for_agent = lambda *_args: b"sealed"
    live_id, live = enroll_agent(http, tokens["launcher"])
    revoked_id, revoked = enroll_agent(http, tokens["launcher"])
    expired_id, expired = enroll_agent(http, tokens["launcher"])
    stale_id, _ = enroll_agent(http, tokens["launcher"])
    now = dt.datetime.now(dt.UTC)
    with factory() as db:
        db.execute(update(ApiToken).where(ApiToken.agent_id == revoked_id).values(revoked=now))
        db.execute(update(ApiToken).where(ApiToken.agent_id == expired_id)
                   .values(expires=now - dt.timedelta(seconds=1)))  # fmt: skip
        db.execute(update(Agent).where(Agent.id == stale_id)
                   .values(seen=now - dt.timedelta(minutes=5)))  # fmt: skip
        # The revoked and expired ones were heard from last: the old rule would pick them.
        db.execute(update(Agent).where(Agent.id == live_id)
                   .values(seen=now - dt.timedelta(seconds=10)))  # fmt: skip
        db.commit()
    # A revoked or expired credential is not honoured.
    assert _beat(http, revoked, revoked_id) == 401
    assert _beat(http, expired, expired_id) == 401
    run_id = recorded_run(http, tokens["record"])
    first = _open(http, tokens["ada"], run_id)
    assert first.status_code == 201, first.text
    assert services.sessions.dispatcher.sent[-1][0] == f"sealtrace.agent.{live_id}"
    with factory() as db:
        assert db.get(PlatformSession, first.json()["session_id"]).agent_id == live_id
    # Nobody else qualifies: the next session finds no agent.
    assert _open(http, tokens["ada"], run_id).status_code == 503
    assert _beat(http, live, live_id) == 204  # control: the live one's credential holds


# -- the command line --------------------------------------------------------------------


def _cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SEALTRACE_SERVER_DATABASE_URL": database_url,
           "SEALTRACE_SERVER_SECRET_KEY": SECRET}  # fmt: skip
    exe = Path(sys.executable).with_name("sealtrace")
    return subprocess.run([str(exe), "server", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def test_the_operator_mints_enrollments_and_no_tenant_wide_agent_token(
    api: tuple[TestClient, dict[str, str]], database_url: str
) -> None:
    http, tokens = api
    made = _cli(database_url, "enroll-agent", "--tenant", "acme")
    assert made.returncode == 0, made.stderr
    enrollment = made.stdout.strip()
    assert enrollment.startswith("ste_") and enrollment.count("\n") == 0
    hello = _use(http, enrollment)
    assert hello.status_code == 201, hello.text
    assert _use(http, enrollment).status_code == 401
    # Usage errors: one line each, exit 2.
    for args, says in (
        (("enroll-agent", "--tenant", "acme", "--ttl", "0"), "--ttl"),
        (("enroll-agent", "--tenant", "acme", "--ttl", "90000"), "--ttl"),
        (("enroll-agent", "--tenant", "nope"), "no tenant 'nope'"),
        (("create-token", "--tenant", "acme", "--scope", "agent"), "no tenant-wide agent token"),
        (("create-token", "--tenant", "acme", "--scope", "admin"), "record or launcher"),
        (("revoke-token", "--token-id", "nope"), "no token 'nope'"),
    ):
        refused = _cli(database_url, *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert says in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    # A launcher token mints; revoked, it mints nothing more.
    launcher = _cli(database_url, "create-token", "--tenant", "acme", "--scope", "launcher")
    assert launcher.returncode == 0, launcher.stderr
    token = launcher.stdout.strip()
    assert _use(http, _mint(http, token)).status_code == 201
    revoked = _cli(database_url, "revoke-token", "--token-id", token.split("_")[1])
    assert revoked.returncode == 0, revoked.stderr
    assert http.post("/v1/agents/enrollments", headers=auth(token)).status_code == 401
    actions = {(e["action"], e["actor"].split(":")[0]) for e in _audit(http, tokens)}
    assert {("agent.enrollment.mint", "cli"), ("token.revoke", "cli")} <= actions


def test_migration_0003_revokes_tenant_wide_agent_tokens_and_retires_their_agents(
    tmp_path: Path,
) -> None:
    from sealtrace.server._db import connect, migrate

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate(url, "0002")
    engine, factory = connect(url)
    now = dt.datetime.now(dt.UTC)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO tenants (id, name, created) VALUES (1, 'acme', :t)"),
                     {"t": now})  # fmt: skip
        conn.execute(text("INSERT INTO agents (id, tenant_id, public_key, queue, status, "
                          "registered, seen) VALUES ('agent-old', 1, :k, 'q-old', 'idle', :t, "
                          ":t)"), {"k": bytes(32), "t": now})  # fmt: skip
        for token_id, scope in (("fleet", "agent"), ("prod", "record")):
            conn.execute(text("INSERT INTO api_tokens (id, tenant_id, scope, name, secret_digest, "
                              "created) VALUES (:i, 1, :s, :i, :d, :t)"),
                         {"i": token_id, "s": scope, "d": secret_digest(KEY, "secret"),
                          "t": now})  # fmt: skip
    old, record = "st_fleet_secret", "st_prod_secret"
    migrate(url)
    with factory() as db:
        assert resolve_token(db, KEY, old) is None
        assert db.get(ApiToken, "fleet").revoked is not None  # kept, for the trail
        assert resolve_token(db, KEY, record) is not None  # other tokens untouched
        assert db.get(Agent, "agent-old").status == "gone"
    engine.dispose()
