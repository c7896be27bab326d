"""The agent fails closed: whatever goes wrong while serving a session (not only the errors
it expects) is reported to the server as the session failing, the sandbox is closed, and the
caller ends the agent."""

from __future__ import annotations

import base64
from typing import Any

import pytest

import sealtrace.agent._serving as serving
from sealtrace.agent._serving import Assignment, serve
from sealtrace.proxy.format import RecordingStatus, Secret, generate_identity


class Server:
    """Records what the agent tells the server (the real server is exercised end to end in
    tests/e2e; this checks the one path that must never be skipped)."""

    def __init__(self) -> None:
        self.states: list[tuple[str, str, str, str | None]] = []

    def state(self, agent: str, session: str, status: str, detail: str | None = None) -> None:
        self.states.append((agent, session, status, detail))

    def next(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a failed session asks for no question")


class Store:
    def list(self) -> None:
        return None


class Header:
    wrapped_key = b"w" * 80


ASSIGNMENT = Assignment.parse(
    {"session_id": "sess-1", "run_id": "run-1", "store": "s3://b/acme/run-1",
     "sealed_key": base64.b64encode(b"x" * 32).decode()}
)  # fmt: skip


@pytest.mark.parametrize("exc", [RuntimeError("boom"), TypeError("bad"), MemoryError()])
def test_an_unexpected_error_fails_the_session(
    exc: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> bytes:
        raise exc

    monkeypatch.setattr(serving, "open_store", lambda location: Store())
    monkeypatch.setattr(serving, "read_header", lambda source, listing: (Header(), b""))
    monkeypatch.setattr(serving, "open_session_key", broken)
    server = Server()
    ended = serve(ASSIGNMENT, generate_identity(), "agent-1", server, lambda *a: None)  # type: ignore[arg-type]
    assert ended == "failed"
    assert [s[:3] for s in server.states] == [("agent-1", "sess-1", "failed")]
    assert server.states[0][3] is not None and type(exc).__name__ in server.states[0][3]


def test_a_sandbox_that_breaks_mid_session_is_closed_and_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed: list[bool] = []

    class Client:
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(serving, "open_session_key", lambda *a, **k: Secret.copy_of(b"k" * 32))
    monkeypatch.setattr(
        serving, "read_process", lambda *a, **k: (b"plaintext", RecordingStatus(complete=True))
    )
    monkeypatch.setattr(serving, "open_store", lambda location: Store())
    monkeypatch.setattr(serving, "read_header", lambda source, listing: (Header(), b""))
    monkeypatch.setattr(serving, "parse_stream", lambda data: None)

    class Failing(Server):
        def state(self, agent: str, session: str, status: str, detail: str | None = None) -> None:
            super().state(agent, session, status, detail)
            if status == "ready":
                raise KeyError("the server's answer lacked a field")

    server = Failing()
    ended = serve(ASSIGNMENT, generate_identity(), "agent-1", server, lambda *a: Client())  # type: ignore[arg-type]
    assert ended == "failed" and closed == [True]
    assert [s[2] for s in server.states] == ["ready", "failed"]
