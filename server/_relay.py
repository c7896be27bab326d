"""Questions and answers between a session's users and its agent, held in this server's
memory only.

An answer carries values from the recording, so it is never written down: not to the
database, not to Redis, not to a log. A user's request puts a question here and waits; the
agent's long poll takes it, and its answer wakes the request. An agent that stops polling
while a question waits is taken as gone, and its session fails.

One server process holds a session's relay; running several needs requests for a session
routed to the process that opened it (not built).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ._errors import AgentGone, SessionClosed

__all__ = ["Question", "Relay"]


@dataclass
class Question:
    id: int
    request: dict[str, Any]
    answer: dict[str, Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Mailbox:
    pending: list[Question] = field(default_factory=list)
    taken: dict[int, Question] = field(default_factory=dict)
    closing: bool = False
    failed: str | None = None
    polled: float = field(default_factory=time.monotonic)
    asked: float = field(default_factory=time.monotonic)


class Relay:
    def __init__(self, agent_silence: float = 30.0) -> None:
        self.agent_silence = agent_silence
        self._lock = threading.Condition()
        self._boxes: dict[str, _Mailbox] = {}
        self._ids = itertools.count(1)

    def open(self, session_id: str) -> None:
        with self._lock:
            self._boxes[session_id] = _Mailbox()

    def ask(self, session_id: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The agent's answer to `request`; SessionClosed, AgentGone or TimeoutError."""
        with self._lock:
            box = self._box(session_id)
            question = Question(next(self._ids), request)
            box.pending.append(question)
            box.asked = time.monotonic()
            self._lock.notify_all()
        deadline = time.monotonic() + timeout
        while not question.done.wait(0.5):
            with self._lock:
                if box.failed is not None or (box.closing and question in box.pending):
                    raise SessionClosed(box.failed or "the session was closed")
                if time.monotonic() - box.polled > self.agent_silence:
                    box.failed = "its agent stopped answering"
                    self._lock.notify_all()
                    raise AgentGone(box.failed)
            if time.monotonic() > deadline:
                raise TimeoutError("no answer in time")
        assert question.answer is not None
        return question.answer

    def next(self, session_id: str, wait: float) -> Question | None:
        """For the agent: the next question, None after `wait` seconds without one. A closing
        session hands out a `{"kind": "close"}` question last."""
        deadline = time.monotonic() + wait
        with self._lock:
            box = self._box(session_id)
            while True:
                box.polled = time.monotonic()
                if box.pending:
                    question = box.pending.pop(0)
                    box.taken[question.id] = question
                    return question
                if box.closing or box.failed is not None:
                    return Question(0, {"kind": "close"})
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(min(left, 1.0))

    def answer(self, session_id: str, question_id: int, answer: dict[str, Any]) -> bool:
        with self._lock:
            box = self._boxes.get(session_id)
            question = box.taken.pop(question_id, None) if box else None
        if question is None:
            return False
        question.answer = answer
        question.done.set()
        return True

    def close(self, session_id: str, failed: str | None = None) -> None:
        with self._lock:
            box = self._boxes.get(session_id)
            if box is not None:
                box.closing = True
                box.failed = box.failed or failed
                self._lock.notify_all()

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._boxes.pop(session_id, None)

    def idle(self, session_id: str) -> float:
        """Seconds since the session's last question (for the idle timeout)."""
        with self._lock:
            box = self._boxes.get(session_id)
            return time.monotonic() - box.asked if box else 0.0

    def _box(self, session_id: str) -> _Mailbox:
        box = self._boxes.get(session_id)
        if box is None:
            raise SessionClosed("the session is not open on this server")
        return box
