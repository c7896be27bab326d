"""The replay's scheduler: one program thread runs at a time, and each recorded event is
served to its own thread at its turn.

A recording orders every boundary call of every thread (and every sync event: a lock taken,
a queue item got, a thread started) in the order they completed. Replay runs the program's
threads for real, but only one holds the baton at a time: it runs until its next event, and
if that event is not the next in the recording, it hands the baton on and sleeps. So the
threads make their calls, take their locks and get their items in the recorded order, and
whatever a thread does between two of its events happens as one step after the first. Every
pass of a query runs the same steps in the same order, which the provenance engine's
instruction counter relies on.

Whom the baton goes to (pick): the thread whose event is next, if it is waiting for it; else
a thread that has not run yet (it runs up to its first event); else a thread whose sync event
could not be completed yet (a lock whose holder had not reached its release), to try again.
When none can run, the program cannot go on as recorded: a thread the next event belongs to
has ended or never started, or every thread waits for another (a data race took the replay
elsewhere). The scheduler reports that, naming the threads and where each one is.

It never uses a lock the boundary may have replaced: each thread sleeps on a real lock of its
own, and only the baton's holder runs scheduler code, so the scheduler needs no lock of its
own either.
"""

from __future__ import annotations

import _thread
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Deadlock", "Scheduler", "ThreadState"]

_allocate_lock = _thread.allocate_lock  # captured: the boundary replaces threading's names
_get_ident = _thread.get_ident
_sleep = time.sleep
_monotonic = time.monotonic

NEW, RUNNING, AT_TURN, BLOCKED, ENDED = "new", "running", "waiting for its turn", "blocked", "ended"
_TEARDOWN_WAIT = 5.0  # seconds a thread that ended may take to release what join() waits on


@dataclass
class ThreadState:
    index: int
    name: str = ""
    status: str = NEW
    ident: int = 0
    oids: int = 0  # object ids it has handed out
    runs: str = ""  # the function it runs, and where that is defined
    # Held while the thread sleeps; whoever hands it the baton releases it.
    go: Any = field(default_factory=_allocate_lock)

    def __post_init__(self) -> None:
        self.go.acquire()


class Deadlock(Exception):
    def __init__(self, message: str, threads: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.threads = threads


class Scheduler:
    """The baton. `next_owner()` says whose the next event is (None past the last)."""

    def __init__(self, next_owner: Callable[[], int | None], where: Callable[[int], str]) -> None:
        self._next_owner = next_owner
        self._where = where  # a thread's ident -> where it is, for reports
        main = ThreadState(0, "MainThread", RUNNING, _get_ident())
        main.go.release()  # the main thread runs from the start
        main.go.acquire()
        self.threads: dict[int, ThreadState] = {0: main}
        self.by_ident: dict[int, ThreadState] = {main.ident: main}
        self.holder = 0
        self.started = 0  # the highest index given to a thread
        self._ended_at = 0.0  # when a thread last ended (its C teardown may still be under way)

    @property
    def single(self) -> bool:
        return self.started == 0

    def current(self) -> ThreadState | None:
        return self.by_ident.get(_get_ident())

    # -- threads ------------------------------------------------------------------------------

    def spawn(self, index: int) -> ThreadState:
        """A thread the holder is starting, as thread `index`: it runs once it gets the baton."""
        self.started = max(self.started, index)
        state = ThreadState(index)
        self.threads[index] = state
        return state

    def begin(self, state: ThreadState, name: str, runs: str) -> None:
        """In the new thread, before anything of the program's: sleep until picked."""
        state.ident = _get_ident()
        state.name = name
        state.runs = runs
        self.by_ident[state.ident] = state
        state.go.acquire()

    def end(self, state: ThreadState) -> None:
        """In a thread whose function returned: hand the baton on, for good."""
        self._ended_at = _monotonic()
        self._hand_over(state, ENDED)

    def after_fork(self, me: ThreadState) -> None:
        """In a child the replay forked for real: only the forking thread lives on (as in
        the recording's child); every other thread has ended, and holds the baton no more."""
        for state in self.threads.values():
            if state is not me:
                state.status = ENDED
                self.by_ident.pop(state.ident, None)
        me.status = RUNNING
        self.holder = me.index

    # -- turns --------------------------------------------------------------------------------

    def wait_turn(self, state: ThreadState) -> None:
        """Sleep until the next event is this thread's (the caller checks whose it is)."""
        self._hand_over(state, AT_TURN)

    def blocked(self, state: ThreadState) -> None:
        """At its turn, the thread's real object is not ready: let others run, then retry."""
        self._hand_over(state, BLOCKED)

    def _hand_over(self, me: ThreadState, status: str) -> None:
        me.status = status
        chosen = self._pick(me)
        if chosen is None:
            if status == ENDED:
                self.holder = -1
                return
            self._report_deadlock(me)
        assert chosen is not None
        if chosen is me:
            me.status = RUNNING
            self.holder = me.index
            return
        self.holder = chosen.index
        chosen.status = RUNNING
        chosen.go.release()
        if status != ENDED:
            me.go.acquire()  # until someone hands the baton back
            me.status = RUNNING

    def _pick(self, me: ThreadState) -> ThreadState | None:
        owner = self._next_owner()
        if owner is not None:
            state = self.threads.get(owner)
            if state is not None and state.status in (AT_TURN, RUNNING):
                return state if state.status == AT_TURN or state is me else None
        ordered = sorted(self.threads.values(), key=lambda s: s.index)
        for state in ordered:
            if state.status == NEW:
                return state
        for state in ordered:
            if state.status == BLOCKED and state is not me:
                return state
        # Nothing else can run. What a blocked thread waits for may be a thread's teardown
        # (join() waits on what the interpreter releases after the thread's last Python code).
        if me.status == BLOCKED and _monotonic() - self._ended_at < _TEARDOWN_WAIT:
            _sleep(0.001)
            return me
        return None

    def _report_deadlock(self, me: ThreadState) -> None:
        owner = self._next_owner()
        states = self.describe()
        if owner is None:
            message = "every thread waits, and the recording has no event left for any of them"
        else:
            state = self.threads.get(owner)
            if state is None:
                message = f"the next event is thread {owner}'s, which the replay never started"
            elif state.status == ENDED:
                message = f"the next event is thread {owner}'s ({state.name}), which has ended"
            else:
                message = (
                    f"the next event is thread {owner}'s ({state.name}), which is "
                    f"{state.status}; no thread can go on as recorded (a data race between "
                    "threads took the replay another way)"
                )
        raise Deadlock(message, states)

    def describe(self) -> list[dict[str, Any]]:
        """Every thread: index, name, state and where it is (its innermost frame)."""
        frames = sys._current_frames()
        out = []
        for state in sorted(self.threads.values(), key=lambda s: s.index):
            frame = frames.get(state.ident)
            out.append(
                {
                    "index": state.index,
                    "name": state.name,
                    "state": state.status,
                    "location": self._where(state.ident) if frame is not None else None,
                    "runs": state.runs or None,
                }
            )
        return out
