"""Adapters for the process's own nondeterminism: datetime, random seeding, the environment,
and the determinism guard (fork, ctypes; threads are _thread_boundary's).

Each adapter runs identically when recording and when replaying; only the runtime differs.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
from collections.abc import Iterator
from typing import Any

from ._boundary import Patcher
from ._runtime import Runtime

__all__ = [
    "RecordedEnviron",
    "install_datetime",
    "install_environ",
    "install_process_guard",
    "install_random",
    "install_signals",
]


def _as(cls: type, value: Any) -> Any:
    if cls is type(value):
        return value
    if isinstance(value, dt.datetime):
        return cls(
            value.year,
            value.month,
            value.day,
            value.hour,
            value.minute,
            value.second,
            value.microsecond,
            value.tzinfo,
            fold=value.fold,
        )
    return cls(value.year, value.month, value.day)


def install_datetime(rt: Runtime, patcher: Patcher) -> None:
    # datetime's clock reads happen in C; the methods themselves are the boundary.
    base_now = dt.datetime.now
    base_utcnow = dt.datetime.utcnow
    call = rt.call
    utc = dt.UTC

    def now(cls: Any, tz: dt.tzinfo | None = None) -> Any:
        if tz is None:
            return _as(cls, call("datetime.datetime.now", None, base_now))
        if not isinstance(tz, dt.tzinfo):
            raise TypeError("tzinfo argument must be None or of a tzinfo subclass")
        stamp = call("datetime.datetime.now", ("utc",), lambda: base_now(utc))
        return tz.fromutc(_as(cls, stamp.replace(tzinfo=None)).replace(tzinfo=tz))

    def utcnow(cls: Any) -> Any:
        return _as(cls, call("datetime.datetime.utcnow", None, base_utcnow))

    def today(cls: Any) -> Any:
        if issubclass(cls, dt.datetime):
            return _as(cls, call("datetime.datetime.now", None, base_now))
        return _as(cls, call("datetime.date.today", None, lambda: base_now().date()))

    patcher.replace(dt.datetime, "now", classmethod(now))
    patcher.replace(dt.datetime, "utcnow", classmethod(utcnow))
    patcher.replace(dt.date, "today", classmethod(today))


def install_random(rt: Runtime, patcher: Patcher) -> None:
    import _random

    base_seed = random.Random.seed
    set_internal = _random.Random.setstate

    def fresh_state() -> tuple[int, ...]:
        return tuple(_random.Random().getstate())

    def seed(self: random.Random, a: Any = None, version: int = 2) -> None:
        if a is None:
            # Unseeded generators draw from the OS inside C; the state is the boundary value.
            state = rt.call("random.Random.seed", None, fresh_state)
            set_internal(self, state)
            self.gauss_next = None  # type: ignore[attr-defined]
        else:
            base_seed(self, a, version)

    patcher.replace(random.Random, "seed", seed)
    # The module-level generator was seeded at import, before the boundary existed, and the
    # module's `seed` is a method bound to the old function.
    patcher.replace(random, "seed", random._inst.seed)
    random.seed()


class RecordedEnviron(os._Environ):  # type: ignore[type-arg]
    """os.environ as the program saw it: names known at start, values of the allowed names
    known at start, every other value served by a boundary call the first time it is read."""

    def __init__(self, rt: Runtime, known: dict[str, str], names: list[str], real: Any) -> None:
        # os._Environ's own state is deliberately not used; every method is overridden.
        self._rt = rt
        self._known = dict(known)
        self._names = dict.fromkeys(names)
        self._real = real

    def __getitem__(self, key: str) -> str:
        known = self._known.get(key)
        if known is not None:
            return known
        if key not in self._names:
            raise KeyError(key)
        real = self._real
        value: str = self._rt.call("os.environ.__getitem__", (key,), lambda: real[key])
        self._known[key] = value
        return value

    def __setitem__(self, key: str, value: str) -> None:
        for item in (key, value):
            if not isinstance(item, str):
                raise TypeError(f"str expected, not {type(item).__name__}")
        os.putenv(key, value)
        self._known[key] = value
        self._names[key] = None

    def __delitem__(self, key: str) -> None:
        if key not in self._names:
            raise KeyError(key)
        os.unsetenv(key)
        self._known.pop(key, None)
        del self._names[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, key: object) -> bool:
        return key in self._names

    def __repr__(self) -> str:
        return f"environ({{{', '.join(f'{k!r}: {self[k]!r}' for k in self._names)}}})"

    def copy(self) -> dict[str, str]:
        return dict(self)


def install_environ(rt: Runtime, patcher: Patcher) -> None:
    known: dict[str, str] = getattr(rt, "env_allowed", {})
    names: list[str] = getattr(rt, "env_names", list(known))
    patcher.replace(os, "environ", RecordedEnviron(rt, known, names, os.environ))


def install_process_guard(rt: Runtime, patcher: Patcher) -> None:
    if hasattr(os, "fork"):
        patcher.replace(os, "fork", _forking(rt, os.fork))
        # Registered once per runtime, never removed (they do nothing once it has ended):
        # after every handler registered before, before every one registered later.
        os.register_at_fork(
            before=rt.before_fork,
            after_in_parent=rt.after_fork_in_parent,
            after_in_child=rt.after_fork_in_child,
        )
    if hasattr(os, "forkpty"):
        patcher.replace(os, "forkpty", _unsupported_fork(rt, "forkpty", os.forkpty))
    patcher.replace(os, "_exit", _exiting(rt, os._exit))
    patcher.replace(signal, "raise_signal", _raising(rt, signal.raise_signal))
    _guard_ctypes(rt, patcher)


# Signals whose default action ends the process (signal(7): Term and Core).
_ENDS_BY_DEFAULT = frozenset(
    getattr(signal, name)
    for name in (
        "SIGABRT", "SIGALRM", "SIGBUS", "SIGFPE", "SIGHUP", "SIGILL", "SIGINT", "SIGIO",
        "SIGKILL", "SIGPIPE", "SIGPOLL", "SIGPROF", "SIGPWR", "SIGQUIT", "SIGSEGV", "SIGSTKFLT",
        "SIGSYS", "SIGTERM", "SIGTRAP", "SIGUSR1", "SIGUSR2", "SIGVTALRM", "SIGXCPU", "SIGXFSZ",
    )
    if hasattr(signal, name)
)  # fmt: skip


def ends_the_process(signalnum: int) -> bool:
    """Whether raising this signal now ends the process: its default action is to, and the
    program left it at the default (SIGKILL cannot be handled)."""
    if signalnum not in _ENDS_BY_DEFAULT:
        return False
    return signalnum == signal.SIGKILL or signal.getsignal(signalnum) == signal.SIG_DFL


def _raising(rt: Runtime, base: Any) -> Any:
    def raise_signal(signalnum: int) -> None:
        # A program that ends itself with a signal (uvicorn raises the SIGTERM it caught once
        # it has shut down) never reaches its exit: the recording ends here, and replay too.
        if rt.intercepting() and ends_the_process(int(signalnum)):
            rt.ended_by_signal(int(signalnum))
        base(signalnum)
        # A handled one ran its handler in there (recorded as delivered); on replay the
        # real handler is a no-op, and the recorded delivery runs the program's now.
        rt.signals_due()

    return raise_signal


def _forking(rt: Runtime, base: Any) -> Any:
    def fork() -> int:
        if not rt.intercepting():
            return int(base())
        pid = rt.fork(base)
        if pid == 0:
            # random's own at-fork handler reseeded the module's generator from the OS,
            # inside C: reseeded again here, through the boundary, the child's draws are
            # recorded (and replayed) as every other seed.
            random.seed()
        return pid

    return fork


def _unsupported_fork(rt: Runtime, name: str, base: Any) -> Any:
    def fork(*args: Any) -> Any:
        rt.unsupported(
            f"the application called os.{name}() (a pseudo-terminal fork is not recorded)"
        )
        return base(*args)

    return fork


def _exiting(rt: Runtime, base: Any) -> Any:
    def _exit(status: int) -> None:
        # The process ends here without its interpreter's exit (a forked child's usual end:
        # multiprocessing's): the recording ends here too, with this status, and replay.
        if rt.intercepting() and isinstance(status, int):
            rt.exiting("os._exit", int(status), int(status))
        base(status)

    return _exit


def _guard_ctypes(rt: Runtime, patcher: Patcher) -> None:
    import ctypes

    base_getitem = ctypes.CDLL.__getitem__
    seen: set[str] = set()

    def getitem(self: ctypes.CDLL, name_or_ordinal: Any) -> Any:
        key = f"{getattr(self, '_name', '?')}:{name_or_ordinal}"
        if key not in seen:
            seen.add(key)
            rt.note("ctypes", f"{key} is called behind the boundary; its effects are not recorded")
        return base_getitem(self, name_or_ordinal)

    patcher.replace(ctypes.CDLL, "__getitem__", getitem)


# -- signals ------------------------------------------------------------------------------------


def install_signals(rt: Runtime, patcher: Patcher) -> None:
    """signal.signal and signal.getsignal. A Python handler the program installs (or had
    before the recorder: SIGINT's default_int_handler) runs, when recording, through
    rt.deliver_signal, which records its delivery as an event of the thread it ran on (the
    main thread), inside or between the program's boundary calls; on replay the real
    handler is a no-op (no signal from outside reaches the program) and the recorded
    deliveries run the program's handler at their place (ReplayRuntime._deliver_due)."""
    base_signal, base_getsignal = signal.signal, signal.getsignal
    kept: dict[int, Any] = rt.signal_handlers

    def delivering(signum: int, handler: Any) -> Any:
        if rt.replaying:
            return _ignored

        def deliver(number: int, frame: Any) -> Any:
            return rt.deliver_signal(number, handler, frame)

        return deliver

    def install(signum: int, handler: Any) -> Any:
        if not callable(handler):
            return base_signal(signum, handler)
        return base_signal(signum, delivering(signum, handler))

    def signal_(signalnum: Any, handler: Any) -> Any:
        number = int(signalnum)
        previous = install(number, handler)
        shown = kept.get(number, previous)
        if callable(handler):
            kept[number] = handler
        else:
            kept.pop(number, None)
        return shown

    def getsignal(signalnum: Any) -> Any:
        number = int(signalnum)
        return kept[number] if number in kept else base_getsignal(number)

    # Handlers in place before the boundary (SIGINT's default_int_handler) are delivered
    # the same way from now on.
    for number in signal.valid_signals():
        try:
            current = base_getsignal(number)
        except (OSError, ValueError):
            continue
        if callable(current):
            kept[number] = current
            install(number, current)
    patcher.replace(signal, "signal", signal_)
    patcher.replace(signal, "getsignal", getsignal)


def _ignored(signum: int, frame: Any) -> None:
    """The real handler of a replay: a signal from outside runs none of the program's."""
