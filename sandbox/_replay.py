"""The replaying process: re-executes a recorded run with every external call served from
the recording and checked.

Started by sealtrace.sandbox._replay_process with the recorded hash seed, python options and
environment; it reads the plaintext event stream from an inherited pipe, installs the same
boundary adapters the recorder used (backed by ReplayRuntime), imports application modules
from the recorded sources only, runs the target, and writes one JSON receipt to its result
pipe. It never opens a network connection, never writes a file, and never reads the recorded
input files: every external call is answered from the recording.

The first divergence ends the process at once (exit 3) after writing the receipt, so no code
runs past the point where replay stopped being faithful.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from sealtrace.proxy.boundary import (
    THREAD_SHIFT,
    Target,
    ThreadBody,
    WouldBlock,
    args_digest,
    install,
    is_own_code,
    libraries,
    path_under,
    run_target,
)
from sealtrace.proxy.boundary import replay_hooks as _recorder
from sealtrace.proxy.format import CodecError, Event, ParsedStream, SourceFile, parse_stream

from . import _checkpoints  # noqa: F401 - keeps the real fork before the boundary replaces it
from ._environment import environment_problem
from ._schedule import Deadlock, Scheduler

__all__ = ["RecordedSourceFinder", "ReplayRuntime", "describe_event", "main", "output_preview"]

SIGNAL_DELIVERED = "signal.deliver"  # RecordRuntime.SIGNAL_DELIVERED
_PREVIEW = 48
_CONTEXT = 24
# Captured before the boundary replaces anything: the runtime's own I/O is never served.
_monotonic = time.monotonic
_write = os.write
_close = os.close
_exit = os._exit
_waitpid = os.waitpid
_getpid = os.getpid
_exit_code = os.waitstatus_to_exitcode
_sigmask = signal.pthread_sigmask
_sigwait_for = signal.sigtimedwait
_ALL_SIGNALS = signal.valid_signals()


# What a served result brought into the program.
EMPTY = 0  # nothing: the b"" that ends a read, no rows
VALUE = 1  # a value that is no content: a flag (seekable()), a position (tell()), a time
CONTENT = 2  # data: bytes, text, rows; the C objects that asked for it keep it


def brought(value: Any) -> int:
    if isinstance(value, (bytes, bytearray, str, list, tuple, dict)):
        return CONTENT if value else EMPTY
    return VALUE


class ReplayRuntime:
    """Serves recorded results in order and verifies each call against the recording."""

    replaying = True

    def __init__(self, parsed: ParsedStream, result_fd: int) -> None:
        meta = parsed.meta
        self.parsed = parsed
        self.events = parsed.events
        self.position = 0
        self.outputs_matched = 0
        self.output_bytes = 0
        self.result_fd = result_fd
        self.env_allowed: dict[str, str] = meta["env"]
        self.env_names: list[str] = meta["env_names"]
        self.stdio: dict[str, Any] = meta["stdio"]
        self.passthrough_prefixes = tuple(meta["passthrough"])
        # Descriptors the process was started with beyond stdio (a spawned child's pipes from
        # its parent): their calls were recorded, and are served (absent from older ones).
        inherited = meta.get("descriptors") or []
        self._tracked_descriptors = {fd for fd in inherited if type(fd) is int and 2 < fd < 1 << 20}
        self.app_files = {s.path for s in parsed.sources.values()}
        # A recording made before threads were recorded stopped at the first one, and has no
        # lock or queue events (_thread_boundary installs the old guard for it).
        self.records_threads = bool(meta.get("threads"))
        # Another thread's call_soon_threadsafe reaches the event loop at the loop's read of
        # its self-pipe (_thread_boundary._patch_event_loop). Absent from older recordings,
        # whose handoff was a sync event alone.
        self.records_handoffs = bool(meta.get("handoffs"))
        self.scheduler = Scheduler(self._next_owner, self._where)
        self.started = _monotonic()
        # Told of every event served: (index, callee, is an output, what its result brought:
        # brought()); the provenance engine uses it to know which instruction received which
        # external input, and which objects keep the data.
        self.observer: Callable[[int, str, bool, int], None] | None = None
        # Where the receipt goes: the result pipe, or a checkpoint worker's answer channel.
        self.sink: Callable[[dict[str, Any], int], NoReturn] | None = None
        # Told in a thread of the program's when it starts (True) and when its function has
        # returned (False): the provenance engine traces it in between.
        self.on_thread: Callable[[bool], None] | None = None
        # A query pass's answer when the replay reaches the recording's stop point: for its
        # questions the run ends there (what was recorded up to the stop is exact).
        self.on_stop: Callable[[dict[str, Any]], NoReturn] | None = None
        # A query pass's answer at the run's end, where the program does not return to the
        # replay's main (it ended itself with a signal).
        self.on_end: Callable[[], NoReturn] | None = None
        # The process replayed so far ("" the recorded one; after a fork the stream goes on
        # as, the child's path), how many it forked, and the thread whose exit ends the run
        # (a child's is the thread that forked it).
        self.process = ""
        self._children = 0
        self.main_index = 0
        self._discarding: int | None = None  # the pid whose fork's child is thrown away
        # The program's Python signal handlers, by number (install_signals keeps them); the
        # recorded deliveries run them (_deliver_due).
        self.signal_handlers: dict[int, Any] = {}

    def intercepting(self) -> bool:
        return self.scheduler.current() is not None  # a thread of the program's

    def new_oid(self) -> int:
        state = self.scheduler.current()
        if state is None:
            return 0
        state.oids += 1
        return (state.index << THREAD_SHIFT) | state.oids

    # -- threads ------------------------------------------------------------------------------

    def _next_owner(self) -> int | None:
        """Whose the next event is. Past the last, the main thread's if the recording ended
        with the program's exit, which it made: a thread still running then (a daemon, a
        server's shutdown) waits for it, as the process ended under it in the recording."""
        position = self.position
        if position < len(self.events):
            return self.events[position].thread
        return self.main_index if self.parsed.exit else None

    def _await_turn(self, state: Any) -> None:
        """Wait until the next event is this thread's, or there is none left for anyone."""
        while (owner := self._next_owner()) is not None and owner != state.index:
            self._waiting(functools.partial(self.scheduler.wait_turn, state))

    def _where(self, ident: int) -> str:
        frame = sys._current_frames().get(ident)
        return self._describe_frame(frame)

    def sync(self, name: str, key: Any, fn: Any, replay: Any) -> Any:
        event = self._next(name, key)
        # No observer: what orders threads brings no data into the program (a lock's
        # acquire is no input of what the code under it computes).
        value = self._value(event)
        if event.raised:
            raise value
        while True:
            try:
                return replay(value)
            except WouldBlock:
                state = self.scheduler.current()
                if state is None:
                    raise
                self._waiting(functools.partial(self.scheduler.blocked, state))

    def turn(self, name: str, key: Any, act: Any, replay: Any) -> Any:
        done: list[Any] = []

        def at_turn(event: Event) -> None:
            value = self._value(event)
            if event.raised:
                raise value
            done.append(replay(value))

        self._next(name, key, at_turn)
        return done[0]

    def block(self, wait: Any, ready: Any) -> Any:
        state = self.scheduler.current()
        if state is None:
            return wait()
        while (done := ready()) is None:
            if self._next_owner() == state.index and self._deliver_due(None, None):
                continue  # a signal delivered while it waited (a join): its handler ran
            self._waiting(functools.partial(self.scheduler.blocked, state))
        return done

    # -- signals ------------------------------------------------------------------------------

    def deliver_signal(self, signum: int, handler: Any, frame: Any) -> Any:
        return None  # (replay's real handlers are no-ops: install_signals)

    def signals_due(self) -> None:
        state = self.scheduler.current()
        if state is not None and self._next_owner() == state.index:
            self._deliver_due(None, None)

    def _deliver_due(self, name: str | None, key: Any) -> bool:
        """If the next event (this thread's: the caller awaited its turn) is a signal's
        delivery, run the program's handler for it now, as the recording did: at the call
        it came during, or, between instructions, at the thread's next call. False if it
        is not one. A handler that raises inside a call ended that call with its exception
        in the recording: the call's event goes with it."""
        position = self.position
        if position >= len(self.events) or self.events[position].callee != SIGNAL_DELIVERED:
            return False
        event = self.events[position]
        self.position = position + 1
        signum, during = self._value(event)
        handler = self.signal_handlers.get(signum)
        if handler is None:
            self.diverge(event, f"no handler of the program's for signal {signum}", None)
        frame: Any = sys._getframe(1)
        while frame is not None and is_own_code(frame.f_code.co_filename):
            frame = frame.f_back
        try:
            handler(signum, frame)
        except BaseException:
            nxt = self.events[self.position] if self.position < len(self.events) else None
            if (
                during
                and name is not None
                and nxt is not None
                and nxt.raised
                and nxt.callee == name
                and nxt.args_digest == args_digest(key)
            ):
                self.position += 1  # the call it interrupted, which raised what it raised
            raise
        return True

    def start_thread(self, function: Any, args: Any, kwargs: Any, base: Any) -> int:
        scheduler = self.scheduler
        if scheduler.current() is None:
            return int(base(function, args, kwargs))
        index = scheduler.started + 1
        self._next("thread.spawn", (index,))
        state = scheduler.spawn(index)
        runtime = self

        def run() -> None:
            scheduler.begin(state, _thread_name(function), _thread_target(function))
            if runtime.on_thread is not None:
                runtime.on_thread(True)
            try:
                function(*args, **kwargs)
            finally:
                if runtime.on_thread is not None:
                    runtime.on_thread(False)
                runtime._ended(state)

        ident = base(ThreadBody(run, function), ())
        self._next("thread.start", (index,))
        return int(ident)

    def _ended(self, state: Any) -> None:
        try:
            self.scheduler.end(state)
        except Deadlock as exc:
            self._deadlock(exc)

    def _waiting(self, wait: Callable[[], None]) -> None:
        try:
            wait()
        except Deadlock as exc:
            self._deadlock(exc)

    def _deadlock(self, exc: Deadlock) -> NoReturn:
        where, app_where = self._locations()
        self.finish(
            "diverged",
            {
                "event": self.position,
                "expected": describe_event(self.events[self.position])
                if self.position < len(self.events)
                else "the end of the recording",
                "actual": str(exc),
                "location": where,
                "app_location": app_where,
                "threads": exc.threads,
            },
        )

    def note(self, what: str, detail: str) -> None:
        pass

    def call(self, name: str, key: Any, fn: Any) -> Any:
        return self._served(self._next(name, key), name, output=False)

    def invoke(self, name: str, key: Any, obj: Any, method: str, *args: Any) -> Any:
        return self._served(self._next(name, key), name, output=False)

    def output(self, name: str, key: Any, data: Any, fn: Any) -> Any:
        event = self._next(name, key)
        payload = bytes(data)
        if event.data != payload:
            self.diverge(event, name, key, output=payload)
        self.outputs_matched += 1
        self.output_bytes += len(payload)
        return self._served(event, name, output=True)

    def _served(self, event: Event, name: str, *, output: bool) -> Any:
        """The recorded result of a matched event (raised if the call raised)."""
        value = self._value(event)
        if self.observer is not None:
            self.observer(event.index, name, output, brought(value))
        if event.raised:
            raise value
        return value

    def unsupported(self, what: str) -> None:
        if self.position == len(self.events) and self.parsed.stop is not None:
            self._reached_stop()
        self.diverge(None, what, None)

    def _value(self, event: Event) -> Any:
        try:
            return self.parsed.decode(event)
        except CodecError as exc:
            self._emit({"status": "corrupt", "error": f"event {event.index}: {exc}"}, 4)

    def _next(self, name: str, key: Any, at_turn: Callable[[Event], None] | None = None) -> Event:
        if self._discarding is not None and _getpid() != self._discarding:
            _exit(0)  # a thrown-away child's at-fork handlers (fork()): nothing of it is replayed
        scheduler = self.scheduler
        while True:
            if not scheduler.single:
                state = scheduler.current()
                if state is None:
                    self.diverge(
                        None, name, key, note="made by a thread the recording does not know"
                    )
                self._await_turn(state)
            if not self._deliver_due(name, key):
                break
        if self.position >= len(self.events):
            if self.parsed.stop is not None:
                self._reached_stop()
            self.diverge(None, name, key)
        event = self.events[self.position]
        if event.callee != name or event.args_digest != args_digest(key):
            self.diverge(event, name, key)
        if at_turn is not None:
            at_turn(event)  # (turn()) before the next event, whoever's, can be served
        self.position += 1
        return event

    # -- endings ------------------------------------------------------------------------------

    def _describe_frame(self, frame: Any) -> str:
        innermost, app = self._frame_locations(frame)
        return app or innermost

    def _locations(self) -> tuple[str, str | None]:
        return self._frame_locations(sys._getframe(1))

    def _frame_locations(self, frame: Any) -> tuple[str, str | None]:
        innermost = None
        app = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if not is_own_code(filename):
                where = f"{filename}:{frame.f_lineno}"
                innermost = innermost or where
                if app is None and filename in self.app_files:
                    app = where
            frame = frame.f_back
        return innermost or "<unknown>", app

    def diverge(
        self,
        event: Event | None,
        name: str,
        key: Any,
        *,
        output: bytes | None = None,
        note: str | None = None,
    ) -> NoReturn:
        where, app_where = self._locations()
        detail: dict[str, Any] = {
            "event": event.index if event is not None else self.position,
            "expected": describe_event(event)
            if event is not None
            else (
                "the end of the recording"
                if self.parsed.stop is None
                else f"the recording's stop point ({self.parsed.stop.get('reason')})"
            ),
            "actual": f"{name}(args {args_digest(key).hex()[:12]})" if key is not ... else name,
            "location": where,
            "app_location": app_where,
        }
        if note is not None:
            detail["actual"] = f"{detail['actual']} ({note})"
        if not self.scheduler.single:
            # Which thread made the call, and where every other one is: a data race takes a
            # replay elsewhere in one thread because of what another did.
            state = self.scheduler.current()
            detail["thread"] = state.index if state is not None else None
            detail["threads"] = self.scheduler.describe()
        if output is not None and event is not None and event.data is not None:
            offset = next(
                (i for i, (a, b) in enumerate(zip(event.data, output, strict=False)) if a != b),
                min(len(event.data), len(output)),
            )
            detail.update(
                offset=offset,
                expected_bytes=output_preview(event.data, offset),
                actual_bytes=output_preview(output, offset),
                expected_length=len(event.data),
                actual_length=len(output),
            )
        self.finish("diverged", detail)

    def ended_by_signal(self, signalnum: int) -> NoReturn:
        self.exiting("signal.raise_signal", signalnum, 128 + signalnum)

    def exiting(self, name: str, arg: int, status: int) -> NoReturn:
        """The recorded run ended here (a signal it raised, os._exit): the recording's last
        event. A query pass answers as at the program's exit; a replay compares the status."""
        self.call(name, (arg,), None)
        if self.on_end is not None:
            self.on_end()
        self.end(status)

    # -- forks --------------------------------------------------------------------------------

    def fork(self, base: Callable[[], int]) -> int:
        """The program's os.fork(), forked for real as the recording did, so the program's
        at-fork handlers run as they ran there. Where the replayed stream goes on as the
        child's (its switch: parse_stream), the child goes on (only the forking thread, as
        in the recording's child) and the parent waits for it and ends with its status,
        saying nothing. Any other fork's child is thrown away at once, before it can touch
        the recording (it is another process's run), and the program is served its
        recorded pid. `base` (os.fork) is not called: the replay forks in the interpreter's
        three parts itself (_fork_continuing, _fork_discarded), so that the side it does
        not go on as runs no Python."""
        self._children += 1
        path = f"{self.process}.{self._children}" if self.process else str(self._children)
        key = (path,)
        state = self.scheduler.current()
        if not self.scheduler.single and state is not None:
            self._await_turn(state)
        becomes = self._switch_ahead()
        if becomes is not None and becomes != path:
            self.diverge(self.events[self.position], "os.fork", key)
        parent = _getpid()
        self._discarding = parent if becomes is None else None
        # The SIGCHLD of a child the replay throws away is consumed here, not delivered to a
        # handler the program installed (gunicorn's arbiter reaps on it; signals the program
        # got are the recorded ones, see _deliver_due).
        mask = _sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            pid = _fork_continuing() if becomes is not None else _fork_discarded()
        except BaseException:
            _sigmask(signal.SIG_SETMASK, mask)
            raise
        finally:
            self._discarding = None
        if pid == 0:
            _sigmask(signal.SIG_SETMASK, mask)
        elif becomes is None:
            _waitpid(pid, 0)
            _sigwait_for([signal.SIGCHLD], 0)
            _sigmask(signal.SIG_SETMASK, mask)
        else:
            self._outlive(pid)  # (the parent of the process replayed on: never returns)
        if becomes is not None:
            self.process, self._children = path, 0
            if state is not None:
                self.scheduler.after_fork(state)
                self.main_index = state.index
        return int(self._served(self._next("os.fork", key), "os.fork", output=False))

    def _switch_ahead(self) -> str | None:
        """The process the replayed stream goes on as at the fork being made now, if it does.
        Its switch may lie a few events ahead: the program's at-fork handlers (registered
        after the boundary: a lock taken before the fork) made theirs first. A parent's own
        os.fork event before it is an earlier fork's, which this replay stays the parent of."""
        position = self.position
        ahead = [index for index in self.parsed.switches if index >= position]
        if not ahead:
            return None
        index = min(ahead)
        if any(e.callee == "os.fork" for e in self.events[position:index]):
            return None
        return self.parsed.switches[index]

    @staticmethod
    def _outlive(pid: int) -> NoReturn:
        """The replay's parent side of a fork it goes on from as the child: the child now
        answers (its receipt, its frames) through what it inherited; this process waits, with
        every signal blocked, and runs nothing of the program's nor of the interpreter's in
        Python (a query pass's stop must fall in the child's instructions only)."""
        _sigmask(signal.SIG_BLOCK, _ALL_SIGNALS)
        while True:
            try:
                _, status = _waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        _exit(_exit_code(status) & 0xFF)

    def before_fork(self) -> None:
        pass

    def after_fork_in_parent(self) -> None:
        pass

    def after_fork_in_child(self) -> None:
        pass

    def end(self, status: int) -> NoReturn:
        """The program's exit: every recorded event replayed, and the recorded exit status."""
        if self.parsed.stop is not None:
            self.finish("bit-exact" if self.parsed.rotated is not None else "stopped", None, status)
        state = self.scheduler.current()
        while True:
            if not self.scheduler.single and state is not None:
                self._await_turn(state)  # the events other threads made before the exit first
            # A signal handled after the program's last instruction, before its end (a
            # server's SIGCHLD as it exits): the recording has it, and so does the replay.
            try:
                if not self._deliver_due(None, None):
                    break
            except BaseException:  # noqa: S112 - as the interpreter's exit would ignore it
                continue
        if self.position < len(self.events):
            self.diverge(self.events[self.position], "the program's exit", ...)
        recorded = self.parsed.exit.get("status") if self.parsed.exit else None
        if recorded is not None and recorded != status:
            self.finish(
                "diverged",
                {
                    "event": self.position,
                    "expected": f"exit status {recorded}",
                    "actual": f"exit status {status}",
                    "location": "<exit>",
                    "app_location": None,
                },
                status,
            )
        self.finish("bit-exact", None, status)

    def _reached_stop(self) -> NoReturn:
        """Every recorded event matched, up to where the recording stopped (a fork): a query
        pass answers with what it found up to here; a replay says it stopped. A rotated run's
        end is no stop of the recorder's: every event of the run matched, which is bit-exact
        (the receipt's `stop` names the run it goes on in)."""
        assert self.parsed.stop is not None
        if self.on_stop is not None:
            self.on_stop(self.parsed.stop)
        self.finish("bit-exact" if self.parsed.rotated is not None else "stopped", None)

    def finish(
        self, status: str, divergence: dict[str, Any] | None, exit_status: int | None = None
    ) -> NoReturn:
        recorded_exit = self.parsed.exit
        receipt = {
            "status": status,
            "run_id": self.parsed.run_id or self.parsed.meta.get("run_id"),
            "events_replayed": self.position,
            "events_recorded": len(self.events),
            "outputs_matched": self.outputs_matched,
            "output_bytes": self.output_bytes,
            "exit_status": {
                "recorded": recorded_exit.get("status") if recorded_exit else None,
                "replayed": exit_status,
            },
            "stream_digest": self.parsed.digest.hex(),
            "divergence": divergence,
            "stop": self.parsed.stop,
            "notes": [n for n in self.parsed.notes if n.get("detail") not in ("none", "")],
            "seconds": round(_monotonic() - self.started, 6),
        }
        self._emit(receipt, 0 if status == "bit-exact" else 3)

    def _emit(self, receipt: dict[str, Any], code: int) -> NoReturn:
        if self.sink is not None:
            self.sink(receipt, code)
        data = json.dumps(receipt, default=_jsonable).encode()
        view = memoryview(data)
        while view:
            view = view[_write(self.result_fd, view) :]
        _close(self.result_fd)
        _exit(code)


# The interpreter's fork, in its three parts (os.fork is them, with fork() between), so that a
# child the replay throws away runs nothing: the program's at-fork handlers run in the parent
# as the recording ran them, and the child exits before any Python of the program's (a query
# pass's stop falls in no instruction of it).
_python = ctypes.PyDLL(None, use_errno=True)
_before_fork, _after_fork_parent, _after_fork_child, _libc_fork = (
    _python.PyOS_BeforeFork,
    _python.PyOS_AfterFork_Parent,
    _python.PyOS_AfterFork_Child,
    _python.fork,
)
for _part in (_before_fork, _after_fork_parent, _after_fork_child, _libc_fork):
    _part.argtypes = []
_before_fork.restype = _after_fork_parent.restype = _after_fork_child.restype = None
_libc_fork.restype = ctypes.c_int


def _fork_continuing() -> int:
    """os.fork() for a replay that goes on as the child: the child runs the at-fork handlers
    as the recording's did; the parent, which only waits for it (_outlive), runs none."""
    sys.audit("os.fork")
    _before_fork()
    pid = int(_libc_fork())
    if pid == 0:
        _after_fork_child()
        return 0
    if pid < 0:
        errno = ctypes.get_errno()
        _after_fork_parent()
        raise OSError(errno, os.strerror(errno))
    return pid


def _fork_discarded() -> int:
    """os.fork() whose child exits at once, with no at-fork handler of its own."""
    sys.audit("os.fork")
    _before_fork()
    pid = int(_libc_fork())
    if pid == 0:  # pragma: no cover - the child
        _exit(0)
    errno = ctypes.get_errno()
    _after_fork_parent()
    if pid < 0:
        raise OSError(errno, os.strerror(errno))
    return pid


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def output_preview(data: bytes, offset: int) -> str:
    """The bytes around the first difference, as text."""
    return data[max(0, offset - _CONTEXT) : offset + _PREVIEW].decode("utf-8", "replace")


def _thread_target(function: Any) -> str:
    """The function a thread runs (a Thread's target, not its bootstrap), and where it is."""
    owner = getattr(function, "__self__", None)
    target = getattr(owner, "_target", None) or getattr(owner, "run", None) or function
    code = getattr(target, "__code__", None)
    name = getattr(target, "__qualname__", repr(target))
    return f"{name} ({code.co_filename}:{code.co_firstlineno})" if code is not None else name


def _thread_name(function: Any) -> str:
    owner = getattr(function, "__self__", None)  # Thread._bootstrap: the thread's name
    name = getattr(owner, "name", None)
    return name if isinstance(name, str) else getattr(function, "__qualname__", "thread")


def describe_event(event: Event) -> str:
    return f"{event.callee}(args {event.args_digest.hex()[:12]})"


class RecordedSourceFinder(importlib.abc.MetaPathFinder):
    """Imports application modules from the recording; never from the application's files on
    disk, which may have changed since the run (or not exist here at all)."""

    def __init__(self, parsed: ParsedStream, app_roots: list[str], passthrough: list[str]) -> None:
        self._sources = parsed.sources
        self._blobs = parsed.blobs
        self._roots = app_roots
        self._passthrough = passthrough

    def by_path(self, path: str) -> RecordedSourceLoader | None:
        """The loader of the recorded source read from `path` (a module loaded by its file's
        path), if there is one."""
        for source in self._sources.values():
            if source.path == path and not source.path.endswith(os.sep):
                return RecordedSourceLoader(source, self._blobs[source.digest])
        return None

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        source = self._sources.get(fullname)
        if source is None:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            origin = spec.origin if spec is not None else None
            if (
                origin
                and path_under(origin, self._roots)
                and not path_under(origin, self._passthrough)
            ):
                raise ImportError(
                    f"{fullname} was not imported when the run was recorded; replay does not "
                    f"run its file on disk ({origin})",
                    name=fullname,
                )
            return spec
        if source.path.endswith(os.sep):
            spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
            spec.submodule_search_locations = [source.path.rstrip(os.sep)]
            return spec
        loader = RecordedSourceLoader(source, self._blobs[source.digest])
        spec = importlib.util.spec_from_file_location(
            fullname,
            source.path,
            loader=loader,
            submodule_search_locations=[os.path.dirname(source.path)]
            if source.is_package
            else None,
        )
        return spec


def _replayed_file_specs(finder: RecordedSourceFinder) -> Callable[..., Any]:
    """importlib.util.spec_from_file_location, on replay: a module the recording loaded from
    an application file by its path (recorded: sealtrace.proxy's recording_file_specs) runs
    its recorded bytes, as imports by name do (the file may have changed, or not be here)."""
    base = importlib.util.spec_from_file_location

    def spec_from_file_location(name: str, location: Any = None, *args: Any, **kwargs: Any) -> Any:
        spec = base(name, location, *args, **kwargs)
        origin = getattr(spec, "origin", None)
        if spec is not None and kwargs.get("loader") is None and not args:
            recorded = finder.by_path(origin) if isinstance(origin, str) else None
            if recorded is not None:
                spec.loader = recorded
        return spec

    return spec_from_file_location


def _replayed_open_code(finder: RecordedSourceFinder) -> Callable[[Any], Any]:
    """io.open_code, on replay: an application file the recording read as code by its path
    (runpy's run_path; recorded: sealtrace.proxy's recording_open_code) gives its recorded
    bytes, wherever the replay runs (the file may have changed, or not be here)."""
    base = io.open_code

    def open_code(path: Any) -> Any:
        recorded = finder.by_path(os.path.abspath(path)) if isinstance(path, str) else None
        if recorded is not None:
            return io.BytesIO(recorded.get_data(os.path.abspath(path)))
        return base(path)

    return open_code


class RecordedSourceLoader(importlib.abc.SourceLoader):
    def __init__(self, source: SourceFile, data: bytes) -> None:
        self._source = source
        self._data = data

    def get_filename(self, fullname: str) -> str:
        return self._source.path

    def get_data(self, path: str) -> bytes:
        if path == self._source.path:
            return self._data
        raise OSError(f"replay reads only recorded sources, not {path}")

    def is_package(self, fullname: str) -> bool:
        return self._source.is_package

    def path_stats(self, path: str) -> dict[str, Any]:
        raise OSError("recorded sources have no bytecode cache")


def _checked_apart(meta: dict[str, Any]) -> str | None:
    """environment_problem(meta), found by a forked child. Checking the manifest lists and
    parses every distribution on sys.path, in the order this file system lists them, and
    frees most of it: done here, it would leave the free lists (and so the addresses of the
    program's objects, and the order of its sets of them) different in a container and on
    this host. The child's memory goes with it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read_end)
        try:
            answer = {"problem": environment_problem(meta)}
        except BaseException as exc:  # raised again by the parent, as if checked there
            answer = {"failed": f"{type(exc).__name__}: {exc}"}
        _write(write_end, json.dumps(answer).encode())
        os._exit(0)
    os.close(write_end)
    answer = json.loads(_read_all(read_end) or b'{"failed": "the check died"}')
    os.waitpid(pid, 0)
    if "failed" in answer:
        raise RuntimeError(f"checking the environment failed: {answer['failed']}")
    problem: str | None = answer["problem"]
    return problem


def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def main() -> None:
    input_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    query_fd = int(sys.argv[3]) if len(sys.argv) > 3 else None
    data = _read_all(input_fd)
    try:
        parsed = parse_stream(data)
    except CodecError as exc:
        os.write(result_fd, json.dumps({"status": "corrupt", "error": str(exc)}).encode())
        os._exit(4)
    del data
    meta = parsed.meta
    problem = _checked_apart(meta)
    if problem is not None:
        os.write(result_fd, json.dumps({"status": "environment", "error": problem}).encode())
        os._exit(2)
    _recorder.REPLAYING = True
    rt = ReplayRuntime(parsed, result_fd)
    target = Target.from_dict(meta["target"])
    if os.path.isdir(meta["cwd"]):
        os.chdir(meta["cwd"])
    libs = libraries(meta["libraries"])
    finder = RecordedSourceFinder(parsed, meta["app_roots"], meta["passthrough"])
    main_source = parsed.sources.get("__main__")
    sys.path[:] = list(meta["path"])
    sys.meta_path.insert(0, finder)
    importlib.util.spec_from_file_location = _replayed_file_specs(finder)
    io.open_code = _replayed_open_code(finder)  # type: ignore[assignment]
    # The recorder computed these before installing the boundary, which filled sysconfig's
    # and site's caches with unrecorded calls; fill them here too, or the program's first
    # sysconfig.get_path() would make boundary calls the recording does not have.
    _recorder.passthrough_prefixes()
    if meta.get("cold_lookups"):
        # Checking the manifest here listed sys.path's directories on this file system (a
        # container's, whose mtimes are not the recording's): the program must not find
        # those listings, as it found none of the recorder's.
        _recorder.forget_distribution_lookups()
    install(rt, libs)
    provenance = _provenance(query_fd, rt, target, main_source)
    gc.freeze()  # as the recorder does

    def script_source(path: str) -> bytes:
        if main_source is None:
            raise FileNotFoundError(2, "the recording holds no main script", path)
        return parsed.blobs[main_source.digest]

    status, _ = run_target(
        target,
        script_source,
        on_start=provenance.on_start if provenance else None,
        on_uncaught=getattr(provenance, "on_uncaught", None),
    )
    if provenance is not None:
        provenance.finish()
    rt.end(status)


def _provenance(query_fd: int | None, rt: ReplayRuntime, target: Target, main_source: Any) -> Any:
    """Attach the provenance engine for one query pass (sealtrace.sandbox._provenance).

    Passes of one query must run the program identically whatever each asks, so the question
    is read and the engine set up in a quiet scope: what this allocates never moves the
    program's objects (sealtrace._engine.quiet)."""
    if query_fd is None:
        return None
    from sealtrace._engine import quiet

    from ._provenance import Provenance, attach_to_environ

    def redirect(sink: Callable[[dict[str, Any], int], NoReturn]) -> None:
        rt.sink = sink

    with quiet():
        query = json.loads(_read_all(query_fd))
        if query.get("kind") == "sites":  # where each input was asked for: no engine
            from ._sites import InputSites

            return InputSites(rt)
        if query.get("kind") == "serve":
            query = {**query, "release": [rt.result_fd]}
        prov = Provenance(query, rt._emit, redirect)
        rt.observer = prov.on_event
        rt.on_stop = prov.stopped
        rt.on_end = prov.finish
        rt.on_thread = prov.on_thread
        attach_to_environ(prov)
        main_file = (target.file or target.value) if target.kind == "script" else None
        if target.kind == "module" and main_source is not None:
            main_file = main_source.path
        prov.attach(main_file)
    return prov


if __name__ == "__main__":
    main()
