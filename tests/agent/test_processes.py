"""An agent opens the process of the run its assignment names: the recorded process's run, or
a forked one's (its parent's stream up to the fork, then its own), with the session's key.

A real recording of a program that forks, a session key sealed to the agent as the server
seals it, and the in-process answerer: the agent's answer to a question about where the run
marked itself is the child's mark when the assignment names process 1, and the parent's when
it names none.
A process the recording does not hold fails the session, closed.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent._serving import Assignment, serve
from sealtrace.proxy.format import LocalDirStore, generate_identity, read_header, seal_session_key
from sealtrace.proxy.format import unwrap_recording_key as unwrap
from sealtrace.sandbox import Inquiry

from ..conftest import KeyFiles
from ..sandbox.replaying import PYTHON, record, write_app

pytestmark = pytest.mark.integration

PROGRAM = """\
import os


def mark(where):
    return where


def main():
    pid = os.fork()
    if pid == 0:
        mark("child")
        os._exit(0)
    os.waitpid(pid, 0)
    mark("parent")


main()
"""


class Server:
    """What the agent tells the server, and one question, then the close."""

    def __init__(self, at: str = "return:mark") -> None:
        self.states: list[tuple[str, str | None]] = []
        self.answers: list[dict[str, Any]] = []
        self._asked = False
        self._at = at

    def state(self, agent: str, session: str, status: str, detail: str | None = None) -> None:
        self.states.append((status, detail))

    def next(self, agent: str, session: str, wait: float) -> dict[str, Any]:
        if self._asked:
            return {"id": 2, "request": {"kind": "close"}}
        self._asked = True
        return {"id": 1, "request": {"kind": "inspect-stack", "at": self._at}}

    def answer(self, agent: str, session: str, message_id: int, answer: dict[str, Any]) -> None:
        self.answers.append(answer)


def _assignment(store: Path, keys: KeyFiles, agent: Any, process: str) -> Assignment:
    header, _ = read_header(LocalDirStore(store), LocalDirStore(store).list())
    with unwrap(header.wrapped_key, keys.identity, header.run_id) as key:
        sealed = seal_session_key(key, agent.recipient, session_id="sess-1",
                                  run_id=header.run_id, store=str(store),
                                  wrapped_key=header.wrapped_key)  # fmt: skip
    return Assignment.parse({"session_id": "sess-1", "run_id": header.run_id,
                             "store": str(store), "process": process,
                             "sealed_key": base64.b64encode(sealed).decode()})  # fmt: skip


def _serve(store: Path, keys: KeyFiles, agent: Any, process: str, server: Server) -> str:
    """The agent serves `server`'s session on `process` of the run at `store`, in-process."""
    return serve(_assignment(store, keys, agent, process), agent, "agent-1", server,  # type: ignore[arg-type]
                 lambda data, parsed: Inquiry(data, parsed))  # fmt: skip


def _where(server: Server) -> str:
    frame = server.answers[0]["document"]["frames"][0]
    return {local["name"]: local["value"]["repr"] for local in frame["locals"]}["where"]


def test_the_agent_opens_the_process_its_assignment_names(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(tmp_path / "app", PROGRAM)
    store = tmp_path / "rec"
    assert record(keys, store, [PYTHON, str(app)]).proc.returncode == 0
    agent = generate_identity()
    for process, expected in (("1", "'child'"), ("", "'parent'")):
        server = Server()
        ended = _serve(store, keys, agent, process, server)
        assert ended == "closed", server.states
        assert _where(server) == expected, process
    # A process the recording does not hold: the session fails, closed.
    server = Server()
    ended = _serve(store, keys, agent, "2", server)
    assert ended == "failed" and server.states[-1][0] == "failed"
    assert "no process 2" in str(server.states[-1][1])


ROTATED = """\
import time


def mark(where):
    return where


with open({prices!r}) as f:
    base = f.read().strip()
for _ in range(300):
    with open({lines!r}) as f:
        f.read()
    time.time()
mark(base)
"""


def test_the_agent_opens_a_rotated_run_after_the_runs_it_goes_on_from(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """A run the recorder rotated to is replayed after its line: the session key opens the
    run the assignment names, whose `continues` object opens the run before it, and so on;
    the value read in the first run is there at the end of the last."""
    prices, lines = tmp_path / "prices.txt", tmp_path / "lines.txt"
    prices.write_text("'fourty-one'\n")
    lines.write_text("z" * 2000)
    app = write_app(tmp_path / "app", ROTATED.format(prices=str(prices), lines=str(lines)))
    store = tmp_path / "rec"
    done = record(keys, store, [PYTHON, str(app)], "--rotate-size", "64K")
    assert done.proc.returncode == 0, done.proc.stderr
    prices.unlink()
    lines.unlink()
    runs = [store, *sorted(tmp_path.glob("rec.*"), key=lambda p: int(p.suffix[1:]))]
    assert len(runs) >= 3
    last = runs[-1]
    agent = generate_identity()
    server = Server()
    ended = _serve(last, keys, agent, "", server)
    assert ended == "closed", server.states
    assert _where(server) == "\"'fourty-one'\""


KILLED = """\
import os, signal, time


def mark(where):
    return where


mark("before the kill")
for _ in range(300):  # past the recorder's flush: stored before the kill
    time.time()
    time.sleep(0.008)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_the_agent_answers_a_killed_run_as_far_as_it_goes(tmp_path: Path, keys: KeyFiles) -> None:
    """A run the server lists as incomplete (its process was killed) is served up to where
    its recording ends: a question about a point before it is answered."""
    app = write_app(tmp_path / "app", KILLED)
    store = tmp_path / "rec"
    assert record(keys, store, [PYTHON, str(app)]).proc.returncode == 137
    agent = generate_identity()
    server = Server()
    ended = _serve(store, keys, agent, "", server)
    assert ended == "closed", server.states
    assert _where(server) == "'before the kill'"
    # Where the recording ends: the run's last instruction recorded, answered (a replay that
    # ran off the end of a cut recording would be a divergence).
    at_end = Server(at="end")
    ended = _serve(store, keys, agent, "", at_end)
    assert ended == "closed", at_end.states
    document = at_end.answers[0]["document"]
    assert "error" not in at_end.answers[0], at_end.answers[0]
    assert document["frames"][0]["function"] == "<module>"
