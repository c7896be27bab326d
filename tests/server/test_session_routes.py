"""Sessions over the v1 API (the real app, moto's KMS, SQLite and PostgreSQL; the task
queue is a list and the sealing of the run's key is not under test here).

- a session belongs to the user who opened it: another user of the same tenant gets 404 on
  reading, asking and closing it, as for a session that does not exist, and the session is
  left as it was; the auditor's role holds no session permission at all;
- an agent's reports move a session one way only: assigned → ready → closed or failed, and
  assigned → failed; any other move is 409 and leaves the session as it was; repeating the
  state a session is in changes nothing (the agent's acknowledgment of a user's close).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ._api import auth, recorded_run

QUESTION = {"kind": "inspect-stack", "at": "end"}


def _open(http: TestClient, tokens: dict[str, str], user: str = "ada") -> tuple[str, str]:
    """A session `user` opened on a recorded run, and its agent's id."""
    services: Any = http.app.state.services  # type: ignore[attr-defined]
    services.keys.seal_for_agent = lambda *_args: b"sealed"
    hello = {"public_key": base64.b64encode(bytes(range(32))).decode()}
    agent = http.post("/v1/agents", json=hello, headers=auth(tokens["agent"]))
    assert agent.status_code == 201, agent.text
    run_id = recorded_run(http, tokens["record"])
    opened = http.post("/v1/sessions", json={"run_id": run_id}, headers=auth(tokens[user]))
    assert opened.status_code == 201, opened.text
    return opened.json()["session_id"], agent.json()["agent_id"]


def _status(http: TestClient, token: str, session_id: str) -> str:
    got = http.get(f"/v1/sessions/{session_id}", headers=auth(token))
    assert got.status_code == 200, got.text
    return str(got.json()["status"])


def test_a_session_belongs_to_the_user_who_opened_it(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    http, tokens = api
    session_id, agent_id = _open(http, tokens)
    state = http.post(f"/v1/agents/{agent_id}/sessions/{session_id}/state",
                      json={"state": "ready"}, headers=auth(tokens["agent"]))  # fmt: skip
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


# (reports the agent makes first, the report under test, its status, the session after)
MOVES = [
    ([], "ready", 200, "ready"),
    ([], "failed", 200, "failed"),
    (["ready"], "closed", 200, "closed"),
    (["ready"], "failed", 200, "failed"),
    (["ready"], "ready", 200, "ready"),  # a repeated report changes nothing
    (["ready", "closed"], "closed", 200, "closed"),
    ([], "closed", 409, "assigned"),  # closed without ever being ready
    (["ready", "closed"], "ready", 409, "closed"),
    (["ready", "failed"], "ready", 409, "failed"),
    (["failed"], "ready", 409, "failed"),
    (["ready", "closed"], "failed", 409, "closed"),
    (["ready", "failed"], "closed", 409, "failed"),
]


@pytest.mark.parametrize(("before", "report", "code", "after"), MOVES)
def test_an_agent_moves_its_session_one_way(
    api: tuple[TestClient, dict[str, str]], before: list[str], report: str, code: int, after: str
) -> None:
    http, tokens = api
    session_id, agent_id = _open(http, tokens)
    path = f"/v1/agents/{agent_id}/sessions/{session_id}/state"
    for state in before:
        assert http.post(path, json={"state": state},
                         headers=auth(tokens["agent"])).status_code == 200  # fmt: skip
    reply = http.post(path, json={"state": report}, headers=auth(tokens["agent"]))
    assert reply.status_code == code, reply.text
    assert _status(http, tokens["ada"], session_id) == after


def test_a_session_the_user_closed_stays_closed(api: tuple[TestClient, dict[str, str]]) -> None:
    http, tokens = api
    session_id, agent_id = _open(http, tokens)
    path = f"/v1/agents/{agent_id}/sessions/{session_id}/state"
    close = http.post(f"/v1/sessions/{session_id}/close", headers=auth(tokens["ada"]))
    assert close.status_code == 200
    # The agent loads it late: it cannot make it ready again ...
    assert http.post(path, json={"state": "ready"},
                     headers=auth(tokens["agent"])).status_code == 409  # fmt: skip
    assert _status(http, tokens["ada"], session_id) == "closed"
    # ... and its acknowledgment of the close is accepted and changes nothing.
    ack = http.post(path, json={"state": "closed"}, headers=auth(tokens["agent"]))
    assert ack.status_code == 200 and ack.json()["detail"] == "closed by the user"
