"""A checkpoint is a fork of the replay, and a question resumes the program inside it: the
program must not be able to tell. Python runs a fork's at-fork handlers (logging resets its
lock, random reseeds its generator in the child) and asyncio's C part stamps the running loop
with the kernel's process id; each would make a question resumed from a checkpoint take
another path than the run did; and the serve pass's own objects, freed while the program runs,
would move its collections (a finalizer then runs at another instant). Every checkpoint of
these programs' sessions resumes as the run went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox._checkpoints import CheckpointPolicy
from sealtrace.sandbox._inquiry import Inquiry
from sealtrace.sandbox._replay_process import load_recording
from sealtrace.sandbox.questions import Trace

from ..conftest import KeyFiles
from .replaying import PYTHON, record, write_app

pytestmark = pytest.mark.integration

# The global generator (seeded from os.urandom at import, which the recording serves) and a
# logger's lock, used all along: a checkpoint falls between any two steps.
RANDOM_AND_LOGGING = """
import logging
import random

log = logging.getLogger("steps")
values = []
total = 0
for i in range(4000):
    total += i * i % 7
    if i % 200 == 0:
        log.debug("step %d", i)
        logging.getLogger(f"steps.{i}")
        values.append(random.random())
last = values[-1]
print(total, values)
"""

# A running event loop all along, as a server's.
EVENT_LOOP = """
import asyncio


async def main():
    total = 0
    for i in range(300):
        await asyncio.sleep(0)
        asyncio.get_running_loop()
        total += sum(range(i % 40))
    return total


last = asyncio.run(main())
print(last)
"""

# Cyclic garbage whose finalizers note when they ran: found only by a collection, which comes
# when the young generation has counted enough allocations. Past its cap the serve pass
# thins its checkpoints and re-arms its interval with a new callback; the old one, freed
# under the program, counted a deallocation against the young generation, so every later
# checkpoint's collections came an allocation late and the finalizers noted other steps.
FINALIZERS = """
class Node:
    def __init__(self):
        self.me = self

    def __del__(self):
        ran.append((step, phase))


ran = []
for step in range(3000):
    phase = 0
    Node()
    phase = 1
    kept = [step]
last = ran[-40:]
print(len(kept))  # not the steps: the recorder's own allocations move them too
"""

# Each program, the cap on its checkpoints and how many at least its session keeps.
PROGRAMS = {
    "random_and_logging": (RANDOM_AND_LOGGING, 64, 11),
    "event_loop": (EVENT_LOOP, 64, 11),
    "finalizers": (FINALIZERS, 8, 5),  # thinned many times
}


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_checkpoint_resumes_the_run_as_it_went(
    tmp_path: Path, keys: KeyFiles, program: str
) -> None:
    source, cap, least = PROGRAMS[program]
    app = write_app(tmp_path / "app", source)
    recorded = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    data, parsed = load_recording(str(recorded.location), keys.identity)
    question = Trace(at="end", var="last", depth=4)
    with Inquiry(data, parsed, timeout=60) as plain:
        whole = plain.trace(question)
        end = int(plain.survey()["end"])
    with Inquiry(
        data, parsed, timeout=60, checkpoints=CheckpointPolicy(2_000, cap, budget=0.0)
    ) as session:
        session.survey()
        server = session._replay
        assert server is not None
        server.keep = 0  # every pass from a checkpoint the run took
        checkpoints = sorted(server.checkpoints, reverse=True)
        assert len(checkpoints) >= least
        # From each checkpoint, latest first, a pass runs on to the end of the run and finds
        # what the run had there: a fork the program saw would diverge (its next call or
        # its output) or find another value.
        for counter in checkpoints:
            assert server.nearest(end) == counter
            found = session.run({"kind": "locate", "at": {"counter": end}, "expr": "last"}, end)
            assert found.get("found"), found
            assert (found.get("value") or {}).get("summary") == whole["query"]["value"], found
            server._drop(counter)  # the next pass starts from the one before


@pytest.mark.parametrize("stop", ["counter", "line"])
def test_a_checkpoint_a_question_was_not_asked_to_keep_ends_that_checkpoint(stop: str) -> None:
    """A worker sends a checkpoint it was not asked for (what a replayed program writing into
    the socket it inherited could do): the question fails and the checkpoint it was asked
    of is ended, so no later question reads what it sends next as its answer. A locate at a
    line keeps one at its stop, wherever that is: one the answer does not stop at is
    refused the same way."""
    import os
    import socket

    from sealtrace.sandbox._checkpoints import CheckpointedReplay, send

    server = CheckpointedReplay(timeout=10, keep=4)
    try:
        ours, theirs = socket.socketpair()
        server.checkpoints[100] = ours
        stray_read, stray_write = os.pipe()
        send(theirs, {"checkpoint": 999, "pid": 1, "edges": True}, [stray_read])
        if stop == "counter":  # asked to keep 50,000, not 999
            query: dict[str, Any] = {"kind": "locate", "at": {"counter": 50_000}}
        else:  # asked to keep one at the stop, which the answer puts at 1,234
            query = {"kind": "locate", "at": {"file": "app.py", "line": 3, "hit": 1}}
            result = {"kind": "locate", "found": True, "counter": 1_234}
            send(theirs, {"receipt": {"status": "query", "result": result}, "code": 0})
        with pytest.raises(ValueError, match="not asked for"):
            server.ask(query, 50_000)
        assert 100 not in server.checkpoints and 999 not in server.checkpoints
        assert ours.fileno() == -1  # closed: that checkpoint process would leave
        assert server.kept == [] and not server.edged
        theirs.close()
        os.close(stray_read)
        os.close(stray_write)
    finally:
        server.close()


@pytest.mark.parametrize("edges", [False, True])
def test_a_checkpoint_kept_where_the_session_has_one_leaves_one_there(edges: bool) -> None:
    """A question keeps a checkpoint at a counter the session has one at already (a capture
    kept it, or another stop named the same instant): the answer stands, and one checkpoint
    stays there, the one holding the edges since the start if either does."""
    import socket

    from sealtrace.sandbox._checkpoints import CheckpointedReplay, send

    server = CheckpointedReplay(timeout=10, keep=4)
    try:
        ours, theirs = socket.socketpair()
        there, there_peer = socket.socketpair()
        server.checkpoints[100] = ours
        server.edged.add(100)
        server.checkpoints[50_000] = there  # kept by a capture: no edges
        server.kept.append(50_000)
        kept, kept_peer = socket.socketpair()
        send(theirs, {"checkpoint": 50_000, "pid": 1, "edges": edges}, [kept.fileno()])
        kept.close()
        result = {"kind": "locate", "found": True, "counter": 50_000}
        send(theirs, {"receipt": {"status": "query", "result": result}, "code": 0})
        query = {"kind": "locate", "at": {"counter": 50_000}, "slice": {"inherit": True}}
        receipt, code = server.ask(query, 50_000, edges=True)  # from 100: 50,000 is far
        assert code == 0 and receipt["result"] == result
        assert server.kept == [50_000] and (50_000 in server.edged) == edges
        assert (server.checkpoints[50_000] is there) == (not edges)
        if edges:  # the old one's socket closed: that checkpoint process would leave
            assert there.fileno() == -1
        else:  # the new one's, likewise
            kept_peer.settimeout(5)
            assert kept_peer.recv(1) == b""
        theirs.close()
        kept_peer.close()
        there_peer.close()
    finally:
        server.close()


def test_a_question_at_the_very_counter_a_checkpoint_was_kept_at_stops_there(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """A capture far from the serve pass's checkpoints keeps one where it starts (inside a
    counter stop); a later question stopping at exactly that counter is configured inside
    that stop's callback, and must stop there still (it once ran on to the end: "the run
    never reached")."""
    app = write_app(tmp_path / "app", "total = 0\nfor i in range(20000):\n    total += i * 3 % 7\n")
    recorded = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    data, parsed = load_recording(str(recorded.location), keys.identity)
    with Inquiry(data, parsed, timeout=60) as plain:
        at = 70_001
        alone = plain.run({"kind": "locate", "at": {"counter": at}, "expr": "total"})
    with Inquiry(
        data, parsed, timeout=60, checkpoints=CheckpointPolicy(50_000, 64, budget=0.0)
    ) as session:
        session.survey()
        server = session._checkpointed()
        assert server.nearest(at) == 50_000
        session.capture({at})
        assert server.kept == [at] and server.nearest(at) == at
        found = session.run({"kind": "locate", "at": {"counter": at}, "expr": "total"}, at)
    assert found.get("found") and found["counter"] == at, found
    assert found["value"] == alone["value"]


def test_the_time_budget_puts_checkpoints_off_and_the_answers_stay(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """A serve pass spends at most its budget's share of its time taking checkpoints: past
    the first few, a checkpoint falls due at an interval only while what they cost stays
    within that share of the pass's time. With a budget no pass can meet, it keeps only the
    first FREE_CHECKPOINTS and says how many intervals it put off; without one (0), one at
    every interval. The answers are the same either way."""
    from sealtrace.sandbox._checkpoints import FREE_CHECKPOINTS

    app = write_app(tmp_path / "app", RANDOM_AND_LOGGING)
    recorded = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    data, parsed = load_recording(str(recorded.location), keys.identity)
    question = Trace(at="end", var="last", depth=4)
    found = {}
    for budget in (0.0, 1e-9):
        policy = CheckpointPolicy(2_000, 64, budget=budget)
        with Inquiry(data, parsed, timeout=60, checkpoints=policy) as session:
            survey = session.survey()
            found[budget] = (
                sorted(session._checkpointed().checkpoints),
                survey["checkpoints_put_off"],
                session.trace(question)["root"],
            )
    every, none_put_off, answer = found[0.0]
    first, put_off, budgeted = found[1e-9]
    assert len(every) > FREE_CHECKPOINTS + 2 and none_put_off == 0
    # The first at the program's start, then one at each interval until the free ones are
    # spent (the run without a budget thinned its own past its cap: it took more than these).
    assert first == [1, *range(2_000, 2_000 * FREE_CHECKPOINTS, 2_000)]
    assert put_off > 0
    assert budgeted == answer


@pytest.mark.parametrize("budget", [-0.1, 1.0, float("nan")])
def test_a_budget_is_a_share_of_the_pass_below_one(budget: float) -> None:
    with pytest.raises(ValueError, match="budget"):
        CheckpointPolicy(budget=budget)


class _NoEngine:
    """The engine a checkpoint's own code talks to, with nothing to schedule."""

    def every(self, _n: int, _callback: object) -> None:
        pass


class _NoFork:
    """libc's fork failing as it does at the user's process limit (EAGAIN), which root, who
    runs the tests, is never held to: a sandboxed session's processes are."""

    def __call__(self) -> int:
        import errno
        import os

        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))


def test_a_checkpoint_that_cannot_fork_a_worker_says_so_and_waits() -> None:
    """Out of processes, a checkpoint answers a question "unavailable" (naming the question)
    and stays for the next one (it used to raise out of the engine's callback and go on
    running the program as if it were the serve pass, and the session saw its socket close);
    the session's ask raises Unavailable for the inquiry to start the pass elsewhere. The
    checkpoint is a child process here, as in a session: it leaves by _exit when the session
    closes its socket."""
    import os
    import socket
    import time

    import sealtrace.sandbox._checkpoints as checkpoints_module
    from sealtrace.sandbox._checkpoints import (
        CheckpointedReplay,
        Checkpoints,
        Unavailable,
        receive,
        send,
    )

    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the checkpoint: never returns into the test
        try:
            ours.close()
            checkpoints_module._fork = _NoFork()
            checkpoint = Checkpoints.__new__(Checkpoints)
            checkpoint.engine = _NoEngine()
            checkpoint._serve(theirs)  # leaves by _exit(0) at the end of the socket
        finally:
            os._exit(3)
    theirs.close()
    ours.settimeout(10)
    try:
        for n in (1, 2):  # each question is told, and the checkpoint waits for the next
            send(ours, {"query": {"kind": "locate"}, "n": n})
            message, _fds = receive(ours)
            assert message == {"unavailable": "Resource temporarily unavailable", "n": n}
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # still waiting
    finally:
        ours.close()
        deadline = time.monotonic() + 10
        while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if ended[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(ended[1]) == 0  # the session closed it: it left

    server = CheckpointedReplay(timeout=10)
    try:
        ours, theirs = socket.socketpair()
        server.checkpoints[100] = ours
        send(theirs, {"unavailable": "Resource temporarily unavailable", "n": 1})
        with pytest.raises(Unavailable, match="at 100 could not fork a worker"):
            server.ask({"kind": "capture", "counters": [150]}, 150)
        assert 100 in server.checkpoints  # it may serve a later question
        theirs.close()
    finally:
        server.close()


def test_a_serve_pass_that_cannot_fork_goes_on_without_that_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from sealtrace.sandbox._checkpoints import Checkpoints

    control, session = socket.socketpair()
    checkpoints = Checkpoints(_NoEngine(), control.detach(), CheckpointPolicy(10, 4), print)
    monkeypatch.setattr("sealtrace.sandbox._checkpoints._fork", _NoFork())
    assert checkpoints._take(10) is True  # the runner goes on
    assert checkpoints.taken == [] and checkpoints.skipped == 1
    checkpoints.control.close()
    session.close()


def test_a_pass_whose_checkpoint_cannot_fork_replays_from_the_start(
    tmp_path: Path, keys: KeyFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pass of the question from the start when no checkpoint can start it: the same
    answer as with them."""
    from sealtrace.sandbox._checkpoints import CheckpointedReplay, Unavailable

    app = write_app(tmp_path / "app", RANDOM_AND_LOGGING)
    recorded = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    data, parsed = load_recording(str(recorded.location), keys.identity)
    question = Trace(at="end", var="last", depth=4)
    policy = CheckpointPolicy(2_000, 16, budget=0.0)
    with Inquiry(data, parsed, timeout=60, checkpoints=policy) as session:
        expected = session.trace(question)
    asked: list[int] = []

    def unavailable(self: CheckpointedReplay, query: dict[str, Any], start: int, *_: Any) -> Any:
        asked.append(start)
        raise Unavailable("the checkpoint at 1 could not fork a worker")

    monkeypatch.setattr(CheckpointedReplay, "ask", unavailable)
    with Inquiry(data, parsed, timeout=60, checkpoints=policy) as session:
        answer = session.trace(question)
    assert asked  # every pass was asked of a checkpoint first
    assert answer["root"] == expected["root"]


LONG_LOOP = """
total = 0
for i in range(400_000):
    total += i % 7
print(total)
"""


def _children_of(parents: set[int]) -> list[int]:
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
            except OSError:
                continue
            if parent in parents:
                found.append(int(entry))
    return found


def test_a_question_whose_worker_dies_fails_at_once(tmp_path: Path, keys: KeyFiles) -> None:
    """A question's worker killed before it answers (a signal, the memory limit): its
    checkpoint says so and the question fails with ReplayCrashedError at once; before, the
    session waited for the answer forever (in the sandbox, until the agent's silence limit).
    The next question is answered."""
    import os
    import threading
    import time

    from sealtrace.sandbox import ReplayCrashedError

    app = write_app(tmp_path / "app", LONG_LOOP)
    recorded = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    data, parsed = load_recording(str(recorded.location), keys.identity)
    question = Trace(at="end", var="total", depth=2)
    policy = CheckpointPolicy(10**9, 4)  # one checkpoint, before the first instruction
    with Inquiry(data, parsed, timeout=60, checkpoints=policy) as session:
        session.survey()
        server = session._checkpointed()
        killed: list[int] = []

        def kill_the_worker() -> None:
            deadline = time.monotonic() + 30
            while not killed and time.monotonic() < deadline:
                for pid in _children_of(set(server.pids.values())):
                    os.kill(pid, 9)
                    killed.append(pid)
                time.sleep(0.01)

        killer = threading.Thread(target=kill_the_worker)
        killer.start()
        started = time.monotonic()
        with pytest.raises(ReplayCrashedError, match=r"died without an answer \(killed by"):
            session.trace(question)
        killer.join()
        assert killed and time.monotonic() - started < 30
        assert session.trace(question)["root"]["value"]["repr"] == str(
            sum(i % 7 for i in range(400_000))
        )


def test_an_earlier_questions_late_word_is_not_this_ones_answer() -> None:
    """A worker that died after its answer makes its checkpoint report it: the next question
    passes over that report, which names the question before it."""
    import socket

    from sealtrace.sandbox import ReplayCrashedError
    from sealtrace.sandbox._checkpoints import CheckpointedReplay, send

    server = CheckpointedReplay(timeout=10)
    try:
        ours, theirs = socket.socketpair()
        server.checkpoints[100] = ours
        server.asked = 1
        receipt = {"status": "query", "result": {"found": False}}
        send(theirs, {"crashed": "killed by signal 11", "n": 1})  # the first question's
        send(theirs, {"receipt": receipt, "code": 0})
        assert server.ask({"kind": "capture", "counters": [150]}, 150) == (receipt, 0)
        send(theirs, {"crashed": "killed by signal 9", "n": 3})  # this one's
        with pytest.raises(ReplayCrashedError, match="signal 9"):
            server.ask({"kind": "capture", "counters": [150]}, 150)
        theirs.close()
    finally:
        server.close()
