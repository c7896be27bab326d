"""The console's walk through one replay session, held in this server's memory only.

A walk is what the user has seen so far: a list of views (the breadcrumb), each a step of the
run (the stack there, and, when a trace led there, the step of the trace it is) or the flows
of a value; the traces asked; and the recorded source files fetched. All of it holds recorded
values, so, like the relay's answers, it never reaches the database, Redis, a log or a URL:
pages and forms name views, traces and steps by their position only. Going back to an
earlier view and jumping from there drops the views after it, as a browser's history does.

One server process holds a session's walk (as it holds its relay); it is forgotten when the
session is closed, and the oldest walks are forgotten first past MAX_WALKS.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_VIEWS", "MAX_WALKS", "Flow", "Step", "Trail", "Trails"]

MAX_WALKS = 256  # sessions whose walks one server keeps
MAX_VIEWS = 200  # views one walk keeps (the oldest go first)


@dataclass
class Step:
    """A point of the run: the stack there (an inspect-stack answer) and how the user got
    there. `trace` and `path` name the step of a trace it is (its root is path ()); a trace
    step of counter 0 (argv, a constant, a marker) has no stack."""

    counter: int
    stack: dict[str, Any] | None
    label: str  # the breadcrumb's words: the user's own question and the answer's value
    kind: str  # landing, trace, operand, goto
    trace: int | None = None
    path: tuple[int, ...] = ()


@dataclass
class Flow:
    """Where a value went: a flows answer, asked from a step."""

    source: str  # the question's `from`
    label: str
    answer: dict[str, Any]
    counter: int  # the step it was asked from


@dataclass
class Trail:
    owner: int  # the user whose session it is
    views: list[Step | Flow] = field(default_factory=list)
    traces: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, list[str] | None] = field(default_factory=dict)  # None: not recorded
    requests: list[dict[str, Any]] | None = None  # the run's request index, once asked
    notice: str = ""  # the last refusal, shown once on the next page

    def add(self, view: Step | Flow, after: int | None) -> int:
        """Append `view` after the view the user jumped from (dropping any later ones); its
        index."""
        if after is not None and 0 <= after < len(self.views):
            del self.views[after + 1 :]
        self.views.append(view)
        if len(self.views) > MAX_VIEWS:
            del self.views[0]
        return len(self.views) - 1

    def node(self, step: Step) -> dict[str, Any] | None:
        """The trace step a view stands for, if a trace led there."""
        if step.trace is None or not 0 <= step.trace < len(self.traces):
            return None
        node: dict[str, Any] = self.traces[step.trace]["root"]
        for index in step.path:
            node = node["inputs"][index]
        return node


class Trails:
    """Every session's walk on this server, by session id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._walks: OrderedDict[str, Trail] = OrderedDict()

    def of(self, session_id: str, owner: int) -> Trail:
        """The session's walk (a new one the first time); the caller has checked that
        `owner` opened the session."""
        with self._lock:
            trail = self._walks.get(session_id)
            if trail is None or trail.owner != owner:
                trail = self._walks[session_id] = Trail(owner)
            self._walks.move_to_end(session_id)
            while len(self._walks) > MAX_WALKS:
                self._walks.popitem(last=False)
            return trail

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._walks.pop(session_id, None)
