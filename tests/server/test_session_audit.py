"""Opening a session, each question and closing it append an audit event: who (the user),
what (`session.open`, `session.<kind>`, `session.close`), on what (the run and session, the
session) and how it ended (`ok`, `failed`, `denied`), failures and refusals included, in the
user's tenant's chain, which stays whole. Through the real app and database (SQLite and
PostgreSQL, moto's KMS for the audit key); an agent answers over the agent API in a thread of
its own, through the real relay; the sealing of the run's key is not under test here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from sealtrace.server._models import AuditEvent, Tenant

from ._api import auth, enroll_agent, recorded_run, serve_api

QUESTION = {"kind": "inspect-stack", "at": "end"}
STACK = {"query": {"at": "end", "counter": 7}, "frames": []}

Event = tuple[str, str, str, str, int | None]  # actor, action, target, result, tenant


@pytest.fixture
def api(
    database_url: str, store: tuple[Any, Any], kms: tuple[Any, str], audit_key_id: str
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The v1 API, with questions that wait 2 s for their answer."""
    _, factory = store
    yield from serve_api(database_url, factory, kms, audit_key_id=audit_key_id,
                         query_timeout=2.0)  # fmt: skip


def _services(http: TestClient) -> Any:
    return http.app.state.services  # type: ignore[attr-defined]


def _last(http: TestClient) -> int:
    with _services(http).factory() as db:
        return int(db.scalar(select(func.max(AuditEvent.seq))) or 0)


def _since(http: TestClient, seq: int) -> list[Event]:
    with _services(http).factory() as db:
        rows = db.scalars(select(AuditEvent).where(AuditEvent.seq > seq)
                          .order_by(AuditEvent.seq))  # fmt: skip
        return [(r.actor, r.action, r.target, r.result, r.tenant_id) for r in rows]


def _tenant(http: TestClient, name: str) -> int:
    with _services(http).factory() as db:
        return int(db.scalars(select(Tenant.id).where(Tenant.name == name)).one())


class _Agent:
    """The session's agent: takes the next question and answers it with `reply` (or, given
    None, takes it and stays silent), over the agent API, in a thread of its own."""

    def __init__(self, http: TestClient, token: str, agent_id: str, session_id: str) -> None:
        self.http, self.headers = http, auth(token)
        self.path = f"/v1/agents/{agent_id}/sessions/{session_id}"

    def answers(self, reply: dict[str, Any] | None) -> threading.Thread:
        def serve() -> None:
            taken = self.http.get(f"{self.path}/next", params={"wait": 10}, headers=self.headers)
            assert taken.status_code == 200, taken.text
            if reply is not None:
                question = taken.json()["id"]
                sent = self.http.post(f"{self.path}/answers/{question}", json=reply,
                                      headers=self.headers)  # fmt: skip
                assert sent.status_code == 204, sent.text

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        return thread


def test_open_each_question_and_close_are_audited(api: tuple[TestClient, dict[str, str]]) -> None:
    http, tokens = api
    acme, globex = _tenant(http, "acme"), _tenant(http, "globex")
    _services(http).keys.seal_for_agent = lambda *_args: b"sealed"
    agent_id, credential = enroll_agent(http, tokens["launcher"], bytes(range(32)))
    run_id = recorded_run(http, tokens["record"])
    ada, bob = auth(tokens["ada"]), auth(tokens["bob"])

    def audited(method: str, path: str, headers: dict[str, str], code: int,
                **kwargs: Any) -> tuple[Any, list[Event]]:  # fmt: skip
        mark = _last(http)
        reply = http.request(method, path, headers=headers, **kwargs)
        assert reply.status_code == code, reply.text
        return reply, _since(http, mark)

    # Open: ok; failed (the tenant's one agent is busy now); denied (no such run, and a run of
    # another tenant's, which is the same to its user).
    opened, events = audited("POST", "/v1/sessions", ada, 201, json={"run_id": run_id})
    session_id = opened.json()["session_id"]
    assert events == [("user:ada", "session.open", f"{run_id} {session_id}", "ok", acme)]
    _, events = audited("POST", "/v1/sessions", ada, 503, json={"run_id": run_id})
    assert events == [("user:ada", "session.open", run_id, "failed", acme)]
    _, events = audited("POST", "/v1/sessions", ada, 404, json={"run_id": "run-nope"})
    assert events == [("user:ada", "session.open", "run-nope", "denied", acme)]
    _, events = audited("POST", "/v1/sessions", auth(tokens["gil"]), 404, json={"run_id": run_id})
    assert events == [("user:gil", "session.open", run_id, "denied", globex)]

    # A question before the agent is ready fails.
    queries = f"/v1/sessions/{session_id}/queries"
    _, events = audited("POST", queries, ada, 409, json=QUESTION)
    assert events == [("user:ada", "session.inspect-stack", session_id, "failed", acme)]
    ready = http.post(f"/v1/agents/{agent_id}/sessions/{session_id}/state",
                      json={"state": "ready"}, headers=auth(credential))  # fmt: skip
    assert ready.status_code == 200, ready.text

    # Each question: answered; answered with what the contract does not allow; not answered
    # in time; asked by another user; not a question at all.
    agent_side = _Agent(http, credential, agent_id, session_id)
    for reply, code, result in (({"document": STACK}, 200, "ok"),
                                ({"document": {"frames": 1}}, 502, "failed"),
                                (None, 504, "failed")):  # fmt: skip
        thread = agent_side.answers(reply)
        _, events = audited("POST", queries, ada, code, json=QUESTION)
        thread.join(10)
        assert events == [("user:ada", "session.inspect-stack", session_id, result, acme)]
    _, events = audited("POST", queries, bob, 404, json=QUESTION)
    assert events == [("user:bob", "session.inspect-stack", session_id, "denied", acme)]
    _, events = audited("POST", queries, ada, 422, json={"kind": "nonsense"})
    assert events == [("user:ada", "session.question", session_id, "denied", acme)]

    # Close: refused to another user; ok for its own; a question after it fails.
    close = f"/v1/sessions/{session_id}/close"
    _, events = audited("POST", close, bob, 404)
    assert events == [("user:bob", "session.close", session_id, "denied", acme)]
    _, events = audited("POST", close, ada, 200)
    assert events == [("user:ada", "session.close", session_id, "ok", acme)]
    _, events = audited("POST", queries, ada, 409, json=QUESTION)
    assert events == [("user:ada", "session.inspect-stack", session_id, "failed", acme)]

    # The chains those events went into are whole, with the audit key's MAC on their heads.
    verdict = http.get("/v1/audit/verify", headers=auth(tokens["aud"]))
    assert verdict.status_code == 200 and verdict.json()["whole"] is True, verdict.text
