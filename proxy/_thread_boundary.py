"""Adapters for threads: starting them, and the calls that decide between them.

A thread the application starts (threading.Thread, _thread.start_new_thread, and so every
executor and server built on them) is recorded as the next thread of the run: its starter
records the index it gets, then the thread's own calls are recorded under that index
(RecordRuntime.start_thread). What decides between threads, besides the boundary calls
themselves, is who takes a lock and who gets a queue's item first: every lock, re-entrant
lock, thread sentinel (what join() waits on) and SimpleQueue the application makes is a proxy
whose blocking calls are *sync* events. Replay serves every event to its thread in the
recorded order (sandbox/_replay.py's scheduler), so the threads take locks and queue items in
the order they did when recorded, and a program whose threads share state through these
primitives replays exactly.

asyncio hands work between threads without a lock: another thread's call_soon_threadsafe
appends to the loop's ready queue, then wakes the loop through its self-pipe, while the loop
may be computing how long to wait. That handoff is a sync event too (at its start), so the
loop sees the appended callback on replay exactly when it did when recorded.

Locks the recorder made before it was installed (the threading module's own: it imports
threading) stay real; none is held across a boundary call. The import system's locks stay
real too: only the names applications use are replaced (threading.Lock, threading.RLock,
queue.SimpleQueue), not _thread.allocate_lock, which importlib calls.

Each adapter runs identically when recording and when replaying; only the runtime differs.
A proxy never changes what the program sees: the same methods, results and exceptions.
"""

from __future__ import annotations

import _thread
import collections
import contextlib
import importlib.abc
import importlib.machinery
import queue
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

from ._boundary import Patcher
from ._runtime import Hot, Runtime, WouldBlock, native_methods

__all__ = [
    "LockProxy",
    "RLockProxy",
    "SimpleQueueProxy",
    "install_threads",
    "outside_the_program",
]

_real_lock = _thread.allocate_lock
_real_rlock = _thread.RLock
_real_simple_queue = queue.SimpleQueue
_real_sentinel = _thread._set_sentinel  # type: ignore[attr-defined]
_outside = [0]  # > 0 while sealtrace itself runs code the proxies must leave alone


@contextlib.contextmanager
def outside_the_program() -> Iterator[None]:
    """What runs inside is sealtrace's, not the program's: locks made and taken there are
    real and make no event. A replay's checkpoint fork needs it: the interpreter runs
    threading's after-fork handler in the child, which makes a lock and takes it."""
    _outside[0] += 1
    try:
        yield
    finally:
        _outside[0] -= 1


class _LockProxy:
    """What a lock and a re-entrant lock proxy share: acquire is a sync event (what it
    returned: acquired or not), named _ACQUIRE; release and the rest are the real lock's,
    which replay takes at the recorded turn."""

    __slots__ = ("__weakref__", "_oid", "_real", "_rt")
    _ACQUIRE = ""

    def __init__(self, rt: Runtime, real: Any) -> None:
        self._rt = rt
        self._real = real
        self._oid = rt.new_oid()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        real = self._real
        if _outside[0]:
            return bool(real.acquire(blocking, timeout))
        acquired: bool = self._rt.sync(
            self._ACQUIRE,
            (self._oid, bool(blocking), timeout),
            lambda: real.acquire(blocking, timeout),
            self._take,
        )
        return acquired

    def _take(self, acquired: Any) -> bool:
        # Replay: the recorded outcome, with the real lock taken when it was; at its turn the
        # lock is free, unless the thread that holds it has not run up to its release yet.
        if acquired and not self._real.acquire(False):
            raise WouldBlock
        return bool(acquired)

    def __enter__(self) -> bool:
        return self.acquire()

    def release(self) -> None:
        self._real.release()

    def __exit__(self, *exc: object) -> None:
        self._real.release()

    def _at_fork_reinit(self) -> None:
        self._real._at_fork_reinit()


class LockProxy(_LockProxy):
    """A _thread.lock (threading.Lock), or a thread's sentinel (what join() waits on)."""

    __slots__ = ("_sentinel",)
    _ACQUIRE = "lock.acquire"

    def __init__(self, rt: Runtime, real: Any, *, sentinel: bool = False) -> None:
        super().__init__(rt, real)
        # A thread's sentinel: released by the interpreter when the thread is gone, after
        # its last event.
        self._sentinel = sentinel

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._sentinel and blocking and timeout == -1 and not _outside[0]:
            # join(): it returns once the thread is gone, which its own events already place
            # before the joiner's next. No event of its own, so joining a set of threads (an
            # executor's, iterated in the order of their addresses) needs no recorded order.
            real = self._real
            done: bool = self._rt.block(real.acquire, lambda: real.acquire(False) or None)
            return done
        return super().acquire(blocking, timeout)

    acquire_lock = acquire
    release_lock = _LockProxy.release

    def locked(self) -> bool:
        return bool(self._real.locked())

    locked_lock = locked

    def __repr__(self) -> str:
        state = "locked" if self._real.locked() else "unlocked"
        return f"<{state} _thread.lock object at {id(self):#x}>"


class RLockProxy(_LockProxy):
    """A _thread.RLock (threading.RLock's C implementation); Condition's private protocol
    (_is_owned, _release_save, _acquire_restore) goes to the real lock, its re-acquire as a
    sync event too."""

    __slots__ = ()
    _ACQUIRE = "rlock.acquire"

    def _is_owned(self) -> bool:
        return bool(self._real._is_owned())

    def _release_save(self) -> Any:
        return self._real._release_save()

    def _recursion_count(self) -> int:
        # This thread's own acquisitions (0 for another thread's lock): decided by its own
        # calls, which are in the recorded order (multiprocessing's resource tracker asks).
        return int(self._real._recursion_count())

    def _acquire_restore(self, state: Any) -> None:
        real = self._real
        if _outside[0]:
            real._acquire_restore(state)
            return

        def restore(_outcome: Any) -> None:
            if not real.acquire(False):
                raise WouldBlock
            real.release()
            real._acquire_restore(state)  # free, and only this thread runs: no wait

        self._rt.sync(
            "rlock.acquire_restore", (self._oid,), lambda: real._acquire_restore(state), restore
        )

    def __repr__(self) -> str:
        return repr(self._real).replace(f"{id(self._real):#x}", f"{id(self):#x}")


class SimpleQueueProxy:
    """queue.SimpleQueue (what ThreadPoolExecutor hands work out with): get is a sync event,
    so each item goes to the thread that got it when recorded; put never blocks and is the
    real queue's; qsize and empty depend on timing, so they are recorded calls."""

    __slots__ = ("__weakref__", "_oid", "_real", "_rt")
    __class_getitem__: Any = classmethod(types.GenericAlias)
    runtime: Runtime  # set on the class install_threads makes for its runtime

    def __new__(cls) -> Any:
        if _outside[0] or not cls.runtime.intercepting():
            return _real_simple_queue()  # made by the recorder itself, or inside a call
        return super().__new__(cls)

    def __init__(self) -> None:
        self._rt = rt = type(self).runtime
        self._real: Any = _real_simple_queue()
        self._oid = rt.new_oid()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self._real.put(item, block, timeout)

    def put_nowait(self, item: Any) -> None:
        self._real.put_nowait(item)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        real = self._real
        if _outside[0]:
            return real.get(block, timeout)
        return self._rt.sync(
            "queue.get", (self._oid, bool(block), timeout), lambda: real.get(block, timeout),
            self._take,
        )  # fmt: skip

    def _take(self, _outcome: Any) -> Any:
        # Replay: the get returned when recorded, so the item is there by its turn, unless
        # the thread that puts it has not run up to its put yet.
        try:
            return self._real.get_nowait()
        except queue.Empty:
            raise WouldBlock from None

    def get_nowait(self) -> Any:
        return self.get(False)

    def qsize(self) -> int:
        real = self._real
        size: int = self._rt.call("queue.qsize", (self._oid,), lambda: real.qsize())
        return size

    def empty(self) -> bool:
        real = self._real
        empty: bool = self._rt.call("queue.empty", (self._oid,), lambda: real.empty())
        return empty

    def __repr__(self) -> str:
        return f"<_queue.SimpleQueue object at {id(self):#x}>"


class _BuiltinLike:
    """A replacement for a built-in function that behaves like one where the program can tell:
    stored as a class attribute (`lock_class = threading.Lock`) it is not bound to the
    instance, and its repr is the built-in's."""

    __slots__ = ("__wrapped__", "_call")

    def __init__(self, call: Callable[..., Any], original: Any) -> None:
        self._call = call
        self.__wrapped__ = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)

    @property
    def __name__(self) -> str:
        return str(self.__wrapped__.__name__)


def install_threads(rt: Runtime, patcher: Patcher) -> None:
    if not getattr(rt, "records_threads", True):
        _install_v1_guard(rt, patcher)  # replaying a recording made before threads were
        return
    base_start = _thread.start_new_thread

    def start_new_thread(
        function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
    ) -> int:
        if not isinstance(args, tuple):
            raise TypeError("2nd arg must be a tuple")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError("optional 3rd arg must be a dictionary")
        if not callable(function):
            raise TypeError("first arg must be callable")
        return rt.start_thread(function, args, kwargs or {}, base_start)

    def ours() -> bool:
        return not _outside[0] and rt.intercepting()

    lock_class, rlock_class = _fast_class(rt, LockProxy), _fast_class(rt, RLockProxy)

    def allocate_lock() -> Any:
        real = _real_lock()
        return lock_class(rt, real) if ours() else real

    def rlock(*args: Any, **kwargs: Any) -> Any:
        real = _real_rlock(*args, **kwargs)
        return rlock_class(rt, real) if ours() else real

    def set_sentinel() -> Any:
        real = _real_sentinel()
        return LockProxy(rt, real, sentinel=True) if ours() else real

    simple_queue = type(
        "SimpleQueue", (SimpleQueueProxy,), {"__slots__": (), "runtime": rt, "__module__": "_queue"}
    )

    starter = _BuiltinLike(start_new_thread, base_start)
    lock = _BuiltinLike(allocate_lock, _real_lock)
    patcher.replace(_thread, "start_new_thread", starter)
    patcher.replace(_thread, "start_new", starter)
    patcher.replace(threading, "_start_new_thread", starter)
    patcher.replace(threading, "_allocate_lock", lock)
    patcher.replace(threading, "Lock", lock)
    patcher.replace(threading, "_CRLock", _BuiltinLike(rlock, _real_rlock))
    patcher.replace(threading, "_set_sentinel", _BuiltinLike(set_sentinel, _real_sentinel))
    patcher.replace(queue, "SimpleQueue", simple_queue)
    _when_imported("asyncio.base_events", lambda module: _patch_event_loop(rt, patcher, module))


def _fast_class(rt: Runtime, cls: type[_LockProxy]) -> type[_LockProxy]:
    """cls with C twins of acquire and __enter__ (FORM_LOCK) when `rt` records with the C
    per-call path: a lock taken is then one C call, not the Python sync path's five frames.
    cls itself otherwise. A thread's sentinel stays a LockProxy: its join() is no event."""
    hot = {
        name: Hot(cls._ACQUIRE, "acquire", "lock", state=(_outside,))
        for name in ("acquire", "__enter__")
    }
    twins = native_methods(rt, cls, hot)
    if not twins:
        return cls
    made: type[_LockProxy] = type(
        cls.__name__, (cls,), {"__slots__": (), "__module__": cls.__module__, **twins}
    )
    return made


def _install_v1_guard(rt: Runtime, patcher: Patcher) -> None:
    """What a recording made before threads were recorded expects: a thread's start was where
    the recording stopped, and no lock or queue made an event."""
    base_start = _thread.start_new_thread

    def start_new_thread(*args: Any, **kwargs: Any) -> Any:
        rt.unsupported("the application started a thread (threads are not supported in v1)")
        return base_start(*args, **kwargs)

    patcher.replace(_thread, "start_new_thread", start_new_thread)
    patcher.replace(threading, "_start_new_thread", start_new_thread)


def _patch_event_loop(rt: Runtime, patcher: Patcher, base_events: Any) -> None:
    """Another thread's call_soon_threadsafe, in the order the loop saw it.

    Unpatched, that thread appends the callback to the loop's ready queue, which the loop
    reads between its own calls, with no event: where in the loop's run the callback comes
    depends on timing alone (a FastAPI endpoint run in a worker thread put the worker back on
    anyio's idle list before, or after, the loop took the next request). So the callback
    goes to a queue of handoffs instead, in a turn of the handing thread (Runtime.turn: its
    event, then the push, with no other thread's event between), and the loop takes them at
    a point of its own run: each read of its self-pipe, which every handoff writes to after
    its push, takes all the handoffs pushed so far, in a turn whose recorded result is how
    many (replay takes that many, in the recorded order). A callback the loop's own thread
    hands over goes straight to the ready queue, as it does unrecorded."""
    loop_class = base_events.BaseEventLoop
    original = loop_class.call_soon_threadsafe
    if not getattr(rt, "records_handoffs", True):  # an older recording: a sync event alone

        def sync_then_call(self: Any, callback: Any, *args: Any, context: Any = None) -> Any:
            rt.sync("asyncio.call_soon_threadsafe", None, _nothing, _nothing)
            return original(self, callback, *args, context=context)

        patcher.replace(loop_class, "call_soon_threadsafe", sync_then_call)
        return
    handle_class = base_events.events.Handle

    def call_soon_threadsafe(self: Any, callback: Any, *args: Any, context: Any = None) -> Any:
        if self._thread_id == _thread.get_ident() or not rt.intercepting():
            return original(self, callback, *args, context=context)
        self._check_closed()
        if self._debug:
            self._check_callback(callback, "call_soon_threadsafe")
        handle = handle_class(callback, args, self, context)
        if handle._source_traceback:
            del handle._source_traceback[-1]
        pending = _handoffs(self)

        def push(*_recorded: Any) -> None:  # the same when recording and when replaying
            pending.append(handle)

        rt.turn("asyncio.call_soon_threadsafe", None, push, push)
        self._write_to_self()
        return handle

    patcher.replace(loop_class, "call_soon_threadsafe", call_soon_threadsafe)
    _when_imported("asyncio.selector_events", lambda module: _patch_self_pipe(rt, patcher, module))


def _handoffs(loop: Any) -> Any:
    """The loop's queue of callbacks other threads handed over, not yet taken."""
    pending = loop.__dict__.get("_sealtrace_handoffs")
    if pending is None:
        pending = loop.__dict__.setdefault("_sealtrace_handoffs", collections.deque())
    return pending


def _patch_self_pipe(rt: Runtime, patcher: Patcher, selector_events: Any) -> None:
    loop_class = selector_events.BaseSelectorEventLoop
    read_from_self = loop_class._read_from_self

    def read_then_take(self: Any) -> None:
        read_from_self(self)
        pending = _handoffs(self)

        def take_all() -> int:
            return take(len(pending))

        def take(count: Any) -> int:
            """The first `count` handoffs to the ready queue (replay: the count recorded)."""
            if type(count) is not int or count > len(pending):
                raise RuntimeError(
                    f"the event loop took {count!r} handed-over callbacks when recorded, and "
                    f"{len(pending)} are here"
                )
            ready = self._ready
            for _ in range(count):
                ready.append(pending.popleft())
            return count

        if rt.intercepting():
            rt.turn("asyncio.handoffs", None, take_all, take)
        else:
            take_all()

    patcher.replace(loop_class, "_read_from_self", read_then_take)


def _nothing(*_args: Any) -> None:
    return None


class _WhenImported(importlib.abc.MetaPathFinder):
    """Runs `then(module)` once `name` has been imported, without importing it first (a
    recorded program that never uses asyncio does not load it because of the recorder)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self._name = name
        self._then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self._name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self._then

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                then(module)

        spec.loader = Loader()
        sys.meta_path.remove(self)
        return spec


def _when_imported(name: str, then: Callable[[Any], None]) -> None:
    module = sys.modules.get(name)
    if module is not None:
        then(module)
    else:
        sys.meta_path.insert(0, _WhenImported(name, then))
