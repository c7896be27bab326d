"""Fork-based checkpoints: one traced replay, frozen copies of it along the way, and queries
that resume from the nearest copy instead of from the start.

Inside the replaying process (a "serve" pass), the runner forks a checkpoint before the
program's first instruction (counter 0) and then every `interval` instructions. A checkpoint
is a process stopped inside the engine's callback; its socket travels to the session (over
the control socket, SCM_RIGHTS). Asked a question, a checkpoint forks a worker that takes the
question's configuration and simply returns into the program: the run goes on from that
instant, the worker answers over the checkpoint's socket and exits, and the checkpoint waits
for the next question. Past `cap` checkpoints, every other one is dropped and the interval
doubles, so the copies stay spread over the whole run.

The session side (CheckpointedReplay) starts the serve pass, collects the checkpoints as they
arrive (a thread reads the control socket from the start), and
sends each question to the latest checkpoint at or before the counter it starts from.

Messages on every socket are a 4-byte big-endian length and a JSON document.

Inside the replay the boundary has replaced os.fork and the socket module (the program may
not fork or open sockets behind the recording's back), so this module keeps the real fork,
kill, waitpid, open, close and dup2 from import time and speaks through _socket;
sealtrace.sandbox._replay imports it before installing the boundary.
"""

from __future__ import annotations

import _socket
import array
import contextlib
import ctypes
import json
import os
import struct
import sys
import threading
import time
from _thread import _count as _thread_count
from _thread import get_ident as _thread_ident
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from sealtrace.proxy.boundary import outside_the_program

from ._errors import ReplayCrashedError

__all__ = [
    "FREE_CHECKPOINTS",
    "KEEP_GAP",
    "KEPT_WITH_EDGES",
    "CheckpointPolicy",
    "CheckpointedReplay",
    "Checkpoints",
    "Unavailable",
    "process_alive",
    "receive",
    "send",
]

_LENGTH = struct.Struct(">I")
_MAX_MESSAGE = 256 * 1024 * 1024
# libc's fork(), called with the GIL held (PyDLL). os.fork() would also run the interpreter's
# at-fork handlers, which are the program's: logging's takes its module lock in the parent
# and resets it in the child (a checkpoint taken while the program held that lock released
# it under the program: uvicorn's replay then diverged), random's reseeds the child's
# generator. A checkpoint is a pause the program must not see, and it is taken only while
# the program runs on one thread (_alone), so there is nothing those handlers would mend.
_libc_fork = ctypes.PyDLL(None, use_errno=True).fork
_libc_fork.argtypes = []
_libc_fork.restype = ctypes.c_int
_kill = os.kill
_exit = os._exit  # the boundary replaces os._exit: the program's exits are recorded
_waitpid = os.waitpid
_open = os.open
_close = os.close
_dup2 = os.dup2
Socket = _socket.socket
_clock = time.monotonic  # the boundary replays the program's clocks: this one stays real
# What taking a checkpoint costs the serve pass, for its budget: the fork, measured, and as
# much again after it (the pages the pass writes next are copied, shared with the checkpoint;
# measured beside the fork on a pass keeping edges: 1.3 ms the fork, 1.5 ms the copies).
_COST_OF_FORK = 2.0
# Checkpoints a serve pass takes at every interval before its budget applies (a few
# milliseconds in all: a short run's questions stay near their checkpoints).
FREE_CHECKPOINTS = 8


@dataclass(frozen=True)
class CheckpointPolicy:
    """A checkpoint every `interval` instructions, at most `cap` of them (past it every
    other one goes and the interval doubles). With `edges`, the serve pass keeps the edges of
    the live values' ancestry, and each checkpoint holds them: a question stopping at a
    counter slices from the checkpoint before it, not from the start (their memory is in
    docs/provenance.md#checkpoints).

    `budget` bounds the share of the serve pass's time that taking checkpoints costs: past
    the first FREE_CHECKPOINTS, one falls due at an interval only while what the checkpoints
    so far cost, and this one as much as the last, stays within that share of the pass's time
    since its first (0: at every interval). A fork's cost grows with the process and the
    interval counts instructions, whose time varies: without the bound a pass of short
    intervals spent more time forking than replaying. The first few are taken whatever they
    cost: a short run keeps its checkpoints as dense as its interval asks."""

    interval: int = 250_000
    cap: int = 64
    edges: bool = True
    budget: float = 0.1

    def __post_init__(self) -> None:
        if self.interval < 1 or self.cap < 2:
            raise ValueError("checkpoints need an interval of at least 1 and a cap of at least 2")
        if not 0 <= self.budget < 1:
            raise ValueError("a checkpoint budget is a share of the pass's time, from 0 below 1")


def send(sock: Socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    body = json.dumps(message, default=repr).encode()
    frame = _LENGTH.pack(len(body)) + body
    if fds:
        rights = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        sent = sock.sendmsg([frame[:4]], rights)
        sock.sendall(frame[sent:])
    else:
        sock.sendall(frame)


def _exactly(sock: Socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the socket")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def receive(sock: Socket) -> tuple[dict[str, Any], list[int]]:
    head, ancillary, _flags, _addr = sock.recvmsg(4, _socket.CMSG_LEN(4 * 4))
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
    if not head:
        raise EOFError("the other side closed the socket")
    if len(head) < 4:
        head += _exactly(sock, 4 - len(head))
    (length,) = _LENGTH.unpack(head)
    if length > _MAX_MESSAGE:
        raise ValueError(f"a {length}-byte message is over the limit")
    message: dict[str, Any] = json.loads(_exactly(sock, length))
    return message, list(fds)


# -- inside the replaying process -----------------------------------------------------------


def _fork() -> int:
    """fork() with none of the interpreter's at-fork handlers (see _libc_fork), and the
    program's running event loop still running in the child. asyncio's C part stamps the
    running loop with the process id (os.getpid() is the recording's, but this stamp is
    the kernel's): in a fork the loop would be gone, and a question resumed inside an
    asyncio server took another path (uvicorn diverged at its next poll)."""
    events = sys.modules.get("asyncio.events")
    loop = events._get_running_loop() if events is not None else None
    pid = int(_libc_fork())
    if pid < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    if pid == 0 and loop is not None:
        events._set_running_loop(loop)  # type: ignore[union-attr]
    return pid


# A checkpoint is a fork, and a fork keeps only the thread that made it: one taken while the
# program has other threads would lose them, and a question forked from it would wait for
# them forever. A checkpoint falls due only while the program runs on one thread; one that
# falls due while others live is taken at the first check (every _RETRY instructions) that
# finds them gone. A program that always has several threads (a worker pool) gets no
# checkpoint past the first, and its questions replay from the start.
_RETRY = 1024
# A question that starts at least this many instructions past its nearest checkpoint keeps
# one where it starts (CheckpointedReplay.keep): a later question there replays none of them.
KEEP_GAP = 10_000
# Of the checkpoints questions kept, at most this many hold the edges since the start (a
# question's pass that sliced keeps its edges in the checkpoint it keeps at its stop): each
# holds up to KEPT_EDGE_LIMIT input tags (sandbox._provenance), the oldest goes first.
KEPT_WITH_EDGES = 4
_main_ident = threading.main_thread().ident


def _alone() -> bool:
    """Whether the calling thread is the program's only one (the replay runs no thread of
    its own beside the program's)."""
    return _thread_count() == 0 and _thread_ident() == _main_ident


class Checkpoints:
    """The runner's side: takes checkpoints; a checkpoint serves questions by forking."""

    def __init__(
        self,
        engine: Any,
        control_fd: int,
        policy: CheckpointPolicy,
        configure: Callable[[dict[str, Any], Callable[[dict[str, Any], int], NoReturn]], None],
        release: tuple[int, ...] = (),
        holds_edges: Callable[[], bool] = lambda: False,
    ) -> None:
        """release: descriptors a checkpoint must not keep (the result pipe), or the session
        would wait on them for as long as the checkpoint lives. holds_edges: whether the
        engine holds every edge since the start a live value leads back to, now (a checkpoint
        taken then tells the session so: a slice can go on from it)."""
        self.engine = engine
        self.release = release
        self.holds_edges = holds_edges
        self.control = Socket(fileno=control_fd)
        self.interval = policy.interval
        self.cap = policy.cap
        self.configure = configure
        self.taken: list[tuple[int, int]] = []  # (counter, pid)
        self.budget = policy.budget
        self.skipped = 0  # intervals at which the budget put a checkpoint off
        self._first_taken = 0.0  # when the first checkpoint was taken (_clock)
        self._spent = 0.0  # what the checkpoints taken so far cost, and the last one
        self._last_cost = 0.0

    def start(self) -> None:
        """At the program's first instruction, then every interval. Checkpoints are taken
        inside engine callbacks, where nothing they run is traced or counted."""
        self.engine.stop_at_counter(self.engine.counter + 1, self._first)

    def _first(self, frame: Any, counter: int) -> None:
        if self._take(counter):
            self.engine.every(self.interval, self._tick)

    def _tick(self, frame: Any, counter: int) -> None:
        if counter % self.interval:
            return
        if self.budget and len(self.taken) >= FREE_CHECKPOINTS:
            ran = _clock() - self._first_taken
            if self._spent + self._last_cost > self.budget * ran:
                self.skipped += 1  # over the budget: a later interval may take it
                return
        if _alone():
            self._take(counter)
        else:  # take it as soon as the program's other threads have ended
            self.engine.every(_RETRY, self._retry)

    def _retry(self, frame: Any, counter: int) -> None:
        if _alone():
            self.engine.every(self.interval, self._tick)
            self._take(counter)

    def _take(self, counter: int) -> bool:
        """Fork a checkpoint here. True in the runner; False in a worker that a question
        forked from the checkpoint, which goes on with the program from this instant."""
        began = _clock()
        pair: tuple[Socket, Socket] | None = None
        try:
            pair = _socket.socketpair()
            with outside_the_program():  # threading's after-fork handler runs in the child
                pid = _fork()
        except OSError:
            # No descriptor or no process to spare (the user's limits, memory): no checkpoint
            # here, and the run goes on as if it had not fallen due.
            for sock in pair or ():
                sock.close()
            self.skipped += 1
            return True
        mine, theirs = pair
        if pid == 0:
            theirs.close()
            self.control.close()
            for fd in self.release:
                with contextlib.suppress(OSError):
                    _close(fd)
            null = _open(os.devnull, os.O_WRONLY)
            _dup2(null, 2)  # the session reads the runner's stderr to its end
            _close(null)
            self._serve(mine)  # returns only in a worker
            return False
        mine.close()
        message = {"checkpoint": counter, "pid": pid, "edges": bool(self.holds_edges())}
        send(self.control, message, [theirs.fileno()])
        theirs.close()
        self.taken.append((counter, pid))
        if len(self.taken) > self.cap:
            self._thin()
        ended = _clock()
        if not self._first_taken:
            self._first_taken = ended
        self._last_cost = _COST_OF_FORK * (ended - began)
        self._spent += self._last_cost
        return True

    def keep(self, counter: int) -> bool:
        """In a worker: a checkpoint here, kept for the session's later questions (one that
        starts here replays nothing before it); none while other threads run (see _alone).
        As _take: False in a worker a later question forked from the kept checkpoint."""
        return self._take(counter) if _alone() else True

    def _thin(self) -> None:
        kept = [self.taken[0]]
        for i, (counter, pid) in enumerate(self.taken[1:], 1):
            if i % 2 == 0:
                kept.append((counter, pid))
            else:
                with contextlib.suppress(ProcessLookupError):
                    _kill(pid, 9)
                with contextlib.suppress(ChildProcessError):
                    _waitpid(pid, 0)
                send(self.control, {"dropped": counter})
        self.taken = kept
        self.interval *= 2
        self.engine.every(self.interval, self._tick)

    def _serve(self, sock: Socket) -> None:
        """A checkpoint: wait for questions; each is answered by a fork of this instant."""
        self.engine.every(0, None)
        while True:
            try:
                message, _fds = receive(sock)
            except (EOFError, OSError):
                _exit(0)
            number = message.get("n")
            try:
                with outside_the_program():
                    pid = _fork()
            except OSError as exc:
                # No process for the worker: the session asks elsewhere (Unavailable), and
                # this checkpoint waits for the next question.
                send(sock, {"unavailable": exc.strerror or str(exc), "n": number})
                continue
            if pid == 0:
                # A checkpoint the question keeps on its way (Provenance._keep_at) goes to
                # the session over this socket, before the answer.
                self.control = sock
                self.taken = []
                self.configure(message["query"], _answerer(sock))
                return  # the worker returns into the program, configured
            status = 0
            with contextlib.suppress(ChildProcessError):
                status = _waitpid(pid, 0)[1]
            if status != 0:
                # A worker answers and leaves with 0 (_answerer): this one died before its
                # answer (a signal, the memory limit), and the session would wait for it.
                send(sock, {"crashed": _ended(status), "n": number})

    def finish(self) -> None:
        """The runner reached the end of the run; the checkpoints stay, waiting."""
        self.engine.every(0, None)
        self.control.close()


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exited {os.waitstatus_to_exitcode(status)}"


def _answerer(sock: Socket) -> Callable[[dict[str, Any], int], NoReturn]:
    def answer(receipt: dict[str, Any], code: int) -> NoReturn:
        try:
            send(sock, {"receipt": receipt, "code": code})
        finally:
            _exit(0)

    return answer


# -- the session side -----------------------------------------------------------------------


class Unavailable(OSError):
    """A checkpoint that could not start the question's worker (no process to spare): the
    question's pass starts elsewhere."""


def process_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


class CheckpointedReplay:
    """Checkpoints of one recording's replay, and questions answered from the nearest one."""

    def __init__(self, timeout: float | None = None, keep: int = 0) -> None:
        """keep: how many checkpoints questions may add where they start (each at least
        KEEP_GAP instructions past the nearest one); past it the oldest added is dropped."""
        self.timeout = timeout
        self.keep = keep
        self.kept: list[int] = []  # the counters of the checkpoints questions added, oldest first
        self.asked = 0  # questions sent so far: a checkpoint's own messages name theirs
        # The checkpoints that hold the edges since the start (a slice goes on from them): the
        # serve pass's until its edge limit, and those a slicing question kept within its own.
        self.edged: set[int] = set()
        self.control, self.child_end = _socket.socketpair()
        self.checkpoints: dict[int, Socket] = {}
        self.pids: dict[int, int] = {}
        self.first: int | None = None  # the checkpoint before the program's first instruction
        self._broken: BaseException | None = None
        # A long run sends more messages (checkpoints, then the ones thinning dropped) than
        # the control socket holds: they are taken as they come, from the start. Read only
        # after the serve pass, the pass would block on a full socket while the session
        # waited for it to end.
        self._collector = threading.Thread(
            target=self._collect, name="sealtrace-checkpoints", daemon=True
        )
        self._collector.start()

    def _collect(self) -> None:
        try:
            while True:
                try:
                    message, fds = receive(self.control)
                except EOFError:
                    return
                self._take(message, fds)
        except BaseException as exc:  # a broken message: the session is told at collect()
            self._broken = exc

    def _take(self, message: dict[str, Any], fds: list[int]) -> None:
        if "checkpoint" in message:
            counter = int(message["checkpoint"])
            if self.first is None:
                self.first = counter
            self.checkpoints[counter] = Socket(fileno=fds[0])
            self.pids[counter] = int(message["pid"])
            if message.get("edges") is True:
                self.edged.add(counter)
        elif "dropped" in message:
            self.pids.pop(int(message["dropped"]), None)
            self.edged.discard(int(message["dropped"]))
            dropped = self.checkpoints.pop(int(message["dropped"]), None)
            if dropped is not None:
                dropped.close()

    def collect(self) -> None:
        """After the serve pass has ended: every checkpoint it left. Its end of the control
        socket closed with it; closing ours ends the messages."""
        self.child_end.close()
        self._collector.join(self.timeout)
        if self._collector.is_alive():
            raise TimeoutError("the serve pass's checkpoints did not arrive")
        if self._broken is not None:
            raise ValueError(f"a checkpoint message broke: {self._broken}")
        self.control.close()

    def nearest(self, counter: int, edges: bool = False) -> int | None:
        """The latest checkpoint at or before `counter`, if any. The first checkpoint is
        taken before the program's first instruction, so it also stands for every counter
        before it (0, "from the start"): no instruction of the program ran before it, and a
        pass forked there skips the interpreter's start and the runtime's setup.
        edges: one that holds the edges since the start (`edged`)."""
        usable = self.edged if edges else self.checkpoints.keys()
        at_or_before = max((c for c in usable if c <= counter), default=None)
        if at_or_before is None and self.first is not None and self.first in usable:
            return self.first
        return at_or_before

    def ask(
        self, query: dict[str, Any], start: int, edges: bool = False
    ) -> tuple[dict[str, Any], int]:
        """The receipt and exit code of `query`, run from the nearest checkpoint (one that
        holds the edges since the start, if `edges`). A question starting far enough past it
        keeps one where it starts; a locate whose stop is no counter (a line's hit, a
        function's return) keeps one at its stop ("keep": "stop")."""
        counter = self.nearest(start, edges)
        if counter is None:
            raise LookupError(f"no checkpoint at or before {start}")
        sock = self.checkpoints[counter]
        sock.settimeout(self.timeout)
        keep: int | str | None = None
        if self.keep and query.get("kind") == "locate" and "counter" not in query.get("at", {}):
            keep = "stop"
        elif self.keep and start - counter >= KEEP_GAP:
            keep = start
        if keep is not None:
            query = {**query, "keep": keep}
        self.asked += 1
        send(sock, {"query": query, "n": self.asked})
        at_stop: tuple[dict[str, Any], list[int]] | None = None  # taken once the answer says
        while True:
            message, fds = receive(sock)
            if "n" in message and message["n"] != self.asked:
                continue  # an earlier question's worker that died after its answer
            if "unavailable" in message:
                raise Unavailable(f"the checkpoint at {counter} could not fork a worker: "
                                  f"{message['unavailable']}")  # fmt: skip
            if "crashed" in message:
                for fd in at_stop[1] if at_stop is not None else ():
                    os.close(fd)  # a checkpoint it kept on its way: it leaves
                raise ReplayCrashedError(
                    f"the replay of this question from the checkpoint at {counter} died "
                    f"without an answer ({message['crashed']})"
                )
            if "checkpoint" not in message:
                if at_stop is not None:
                    # Kept at the stop: where the answer says the pass stopped, or nothing.
                    stopped = ((message.get("receipt") or {}).get("result") or {}).get("counter")
                    if stopped != int(at_stop[0]["checkpoint"]):
                        self._refuse(at_stop[1], counter)
                    self._keep(*at_stop)
                return message["receipt"], int(message["code"])
            at = int(message["checkpoint"])
            asked = at == keep if isinstance(keep, int) else keep == "stop" and at >= counter
            if not fds or not asked or at_stop is not None:
                self._refuse(fds, counter)
            if keep == "stop":
                at_stop = (message, fds)
            else:
                self._keep(message, fds)

    def _refuse(self, fds: list[int], counter: int) -> NoReturn:
        """A checkpoint the question was not asked to keep: the one asked of is ended too,
        as what it sends next answers nothing asked."""
        for fd in fds:
            os.close(fd)
        self._drop(counter)
        raise ValueError("a question sent a checkpoint it was not asked for")

    def _keep(self, message: dict[str, Any], fds: list[int]) -> None:
        """A checkpoint a question kept; past the cap the oldest kept goes (and past
        KEPT_WITH_EDGES of those holding edges, the oldest of them). Where the session has
        one at that counter already (two stops named differently at one instant, a capture
        that kept one where a later question stops), the one with the edges stays."""
        at = int(message["checkpoint"])
        if at in self.checkpoints:
            if at in self.edged or message.get("edges") is not True:
                for fd in fds:
                    os.close(fd)  # that checkpoint process leaves
                return
            self._drop(at)
            if at in self.kept:
                self.kept.remove(at)
        self._take(message, fds)
        self.kept.append(at)
        if len(self.kept) > self.keep:
            self._drop(self.kept.pop(0))
        with_edges = [c for c in self.kept if c in self.edged]
        if len(with_edges) > KEPT_WITH_EDGES:
            self.kept.remove(with_edges[0])
            self._drop(with_edges[0])

    def _drop(self, counter: int) -> None:
        """End one checkpoint: it leaves when its socket closes."""
        sock = self.checkpoints.pop(counter, None)
        if sock is not None:
            sock.close()
        self.pids.pop(counter, None)
        self.edged.discard(counter)

    def close(self) -> None:
        """End every checkpoint: each leaves when its socket closes; any still there after a
        grace period is killed. Messages still coming (the serve pass failed) stop first."""
        self.child_end.close()
        with contextlib.suppress(OSError):  # (already closed once collected)
            self.control.shutdown(_socket.SHUT_RDWR)
        self._collector.join(5.0)
        for sock in self.checkpoints.values():
            sock.close()
        self.checkpoints.clear()
        deadline = time.monotonic() + 2.0
        for pid in self.pids.values():
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.005)
            if process_alive(pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, 9)
        self.pids.clear()
        self.control.close()
