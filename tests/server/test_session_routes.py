"""Sessions over the v1 API (the real app, moto's KMS, SQLite and PostgreSQL; the task
queue is a list and the sealing of the run's key is not under test here).

- a session belongs to the user who opened it: another user of the same tenant gets 404 on
  reading, asking and closing it, as for a session that does not exist, and the session is
  left as it was; the auditor's role holds no session permission at all;
- an agent's reports move a session one way only: assigned → ready → closed or failed, and
  assigned → failed; any other move is 409 and leaves the session as it was; repeating the
  state a session is in changes nothing; once the session has ended its agent is gone, and
  so is its credential (401), so nothing it reports afterwards moves the session either.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from sealtrace.server import SessionMoveRefused
from sealtrace.server._models import Tenant

from ._api import auth, enroll_agent, recorded_run

QUESTION = {"kind": "inspect-stack", "at": "end"}


def _open(
    http: TestClient, tokens: dict[str, str], user: str = "ada"
) -> tuple[str, str, dict[str, str]]:
    """A session `user` opened on a recorded run, its agent's id and the agent's headers."""
    services: Any = http.app.state.services  # type: ignore[attr-defined]
    services.keys.seal_for_agent = lambda *_args: b"sealed"
    agent_id, credential = enroll_agent(http, tokens["launcher"])
    run_id = recorded_run(http, tokens["record"])
    opened = http.post("/v1/sessions", json={"run_id": run_id}, headers=auth(tokens[user]))
    assert opened.status_code == 201, opened.text
    return opened.json()["session_id"], agent_id, auth(credential)


def _status(http: TestClient, token: str, session_id: str) -> str:
    got = http.get(f"/v1/sessions/{session_id}", headers=auth(token))
    assert got.status_code == 200, got.text
    return str(got.json()["status"])


def test_a_session_belongs_to_the_user_who_opened_it(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    session_id, agent_id, agent = _open(http, tokens)
    state = http.post(f"/v1/agents/{agent_id}/sessions/{session_id}/state",
                      json={"state": "ready"}, headers=agent)  # fmt: skip
    assert state.status_code == 200, state.text
    # Another on-call user of the same tenant: 404, as for a session that does not exist.
    bob = auth(tokens["bob"])
    for reply in (
        http.get(f"/v1/sessions/{session_id}", headers=bob),
        http.post(f"/v1/sessions/{session_id}/queries", json=QUESTION, headers=bob),
        http.post(f"/v1/sessions/{session_id}/close", headers=bob),
        http.get("/v1/sessions/sess-nope", headers=bob),
    ):
        assert reply.status_code == 404, reply.text
    # The auditor's role holds no session permission (least privilege), and another
    # tenant's user sees nothing either.
    assert http.get(f"/v1/sessions/{session_id}", headers=auth(tokens["aud"])).status_code == 403
    assert http.get(f"/v1/sessions/{session_id}", headers=auth(tokens["gil"])).status_code == 404
    # Control: the session is untouched, and its owner reads and closes it.
    assert _status(http, tokens["ada"], session_id) == "ready"
    closed = http.post(f"/v1/sessions/{session_id}/close", headers=auth(tokens["ada"]))
    assert closed.status_code == 200 and closed.json()["status"] == "closed"


# (reports the agent makes first, the report under test, its status, the session after).
# Once its session has ended the agent is gone and its credential with it: 401.
MOVES = [
    ([], "ready", 200, "ready"),
    ([], "failed", 200, "failed"),
    (["ready"], "closed", 200, "closed"),
    (["ready"], "failed", 200, "failed"),
    (["ready"], "ready", 200, "ready"),  # a repeated report changes nothing
    ([], "closed", 409, "assigned"),  # closed without ever being ready
    (["ready", "closed"], "closed", 401, "closed"),
    (["ready", "closed"], "ready", 401, "closed"),
    (["ready", "failed"], "ready", 401, "failed"),
    (["failed"], "ready", 401, "failed"),
    (["ready", "closed"], "failed", 401, "closed"),
    (["ready", "failed"], "closed", 401, "failed"),
]


@pytest.mark.parametrize(("before", "report", "code", "after"), MOVES)
def test_an_agent_moves_its_session_one_way(
    api: tuple[TestClient, dict[str, str]], before: list[str], report: str, code: int, after: str
) -> None:
    http, tokens = api
    session_id, agent_id, agent = _open(http, tokens)
    path = f"/v1/agents/{agent_id}/sessions/{session_id}/state"
    for state in before:
        assert http.post(path, json={"state": state}, headers=agent).status_code == 200
    reply = http.post(path, json={"state": report}, headers=agent)
    assert reply.status_code == code, reply.text
    assert _status(http, tokens["ada"], session_id) == after


def test_a_session_the_user_closed_stays_closed(
    api: tuple[TestClient, dict[str, str]], store: tuple[Any, Any]
) -> None:
    http, tokens = api
    _, factory = store
    session_id, agent_id, agent = _open(http, tokens)
    path = f"/v1/agents/{agent_id}/sessions/{session_id}/state"
    close = http.post(f"/v1/sessions/{session_id}/close", headers=auth(tokens["ada"]))
    assert close.status_code == 200
    # The agent loads it late: its credential ended with the session, so it cannot make it
    # ready again, nor report anything else.
    for state in ("ready", "closed", "failed"):
        assert http.post(path, json={"state": state}, headers=agent).status_code == 401
    assert _status(http, tokens["ada"], session_id) == "closed"
    # The state machine holds on its own too, whatever the credential: an acknowledgment of
    # the close changes nothing, and making the session ready again is refused.
    with factory() as db:
        acme = db.scalars(select(Tenant.id).where(Tenant.name == "acme")).one()
    sessions = http.app.state.services.sessions  # type: ignore[attr-defined]
    ack = sessions.agent_state(acme, agent_id, session_id, "closed")
    assert ack.status == "closed" and ack.detail == "closed by the user"
    with pytest.raises(SessionMoveRefused):
        sessions.agent_state(acme, agent_id, session_id, "ready")
    assert _status(http, tokens["ada"], session_id) == "closed"


def test_a_session_opens_a_process_the_run_forked(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    # A run's recording holds a stream for each process it forked (tests/sandbox/
    # test_forks.py); a session replays one of them, named by its path, and its agent is
    # told which. A path that is not one is refused before anything is assigned.
    http, tokens = api
    services: Any = http.app.state.services  # type: ignore[attr-defined]
    services.keys.seal_for_agent = lambda *_args: b"sealed"
    for _agent in range(2):  # an agent serves one session
        enroll_agent(http, tokens["launcher"])
    run_id = recorded_run(http, tokens["record"])
    ada = auth(tokens["ada"])
    sent = services.sessions.dispatcher.sent
    for bad in ("0", "1.", "x", "1.0", "-1", "1" * 101):
        refused = http.post("/v1/sessions", json={"run_id": run_id, "process": bad}, headers=ada)
        assert refused.status_code == 422, (bad, refused.text)
    assert sent == []
    opened = http.post("/v1/sessions", json={"run_id": run_id, "process": "1.2"}, headers=ada)
    assert opened.status_code == 201, opened.text
    assert opened.json()["process"] == "1.2"
    session_id = opened.json()["session_id"]
    assert http.get(f"/v1/sessions/{session_id}", headers=ada).json()["process"] == "1.2"
    assert sent[-1][1]["process"] == "1.2" and sent[-1][1]["session_id"] == session_id
    # Control: without one, the recorded process ("").
    plain = http.post("/v1/sessions", json={"run_id": run_id}, headers=ada)
    assert plain.status_code == 201 and plain.json()["process"] == ""
    assert sent[-1][1]["process"] == ""
