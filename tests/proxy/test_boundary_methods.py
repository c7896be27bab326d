"""The C twins of the proxies' hot methods and of call entries' wrappers (BoundaryMethod in
sealtrace.proxy._fastpath) are held to the Python methods they stand for: a script of socket,
sqlite3 and plain calls, common cases and the ones the twins hand back (keyword arguments,
odd buffers, closed sockets, calls inside calls), gives the same results and records the same
bytes with either per-call path."""

from __future__ import annotations

import _socket
import hashlib
import inspect
import os
import socket
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sealtrace.proxy import _fastpath
from sealtrace.proxy._boundary import Patcher, call_wrapper
from sealtrace.proxy._net_boundary import install_socket
from sealtrace.proxy._runtime import (
    IMPLEMENTATIONS,
    Hot,
    RecordRuntime,
    native_function,
    native_methods,
    record_runtime,
)
from sealtrace.proxy._sqlite_boundary import install_sqlite3
from sealtrace.proxy._stream import META, parse_stream
from sealtrace.proxy._thread_boundary import install_threads, outside_the_program

from .test_fastpath import _Out

_Script = Callable[[RecordRuntime, list[Any]], None]
_twin = (_fastpath.BoundaryMethod, _fastpath.BoundaryFunction)


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return ("returned", fn())
    except Exception as exc:
        return ("raised", type(exc).__name__, str(exc))


def _state(proxy: Any) -> list[tuple[str, Any]]:
    """A proxy's attributes, wherever they are kept (on the C path, in its ProxyState,
    CursorState or SocketState base), less its real object."""
    state = dict(vars(proxy))
    for base in (_fastpath.ProxyState, _fastpath.CursorState, _fastpath.SocketState):
        for name, member in vars(base).items():
            if type(member).__name__ == "member_descriptor" and hasattr(proxy, name):
                state[name] = getattr(proxy, name)  # on the Python path: maybe the class's
    state.pop("_real", None)
    return sorted(state.items())


def _record(implementation: str, script: _Script) -> tuple[list[Any], bytes, RecordRuntime]:
    out, seen = _Out(), []
    rt = record_runtime(out, implementation=implementation, report=lambda message: None)
    rt.record_value(META, {"run_id": "twins"})
    script(rt, seen)
    rt.finish(0)
    assert rt.outcome == "complete"
    return seen, bytes(out.data), rt


def _both(script: _Script) -> tuple[list[Any], bytes]:
    """What the script saw and recorded, the same with either path. Its first observation
    is whether the call it names was a C twin: the negative control that the C path did
    run its twins (and the Python path did not)."""
    native, python = _record("native", script), _record("python", script)
    assert native[0][0] is True and python[0][0] is False
    assert native[0][1:] == python[0][1:]  # what the program saw
    assert native[1] == python[1]  # what was recorded
    return native[0][1:], native[1]


def _socket_script(path: Path) -> _Script:
    def script(rt: RecordRuntime, seen: list[Any]) -> None:
        path.unlink(missing_ok=True)  # both paths connect to the same address
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # not recorded: unpatched
        server.bind(str(path))
        server.listen(1)
        patcher = Patcher()
        install_socket(rt, patcher)
        try:
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            seen.append(isinstance(type(client).__dict__.get("connect"), _twin))
            seen.append(_state(client))
            seen.append(_outcome(lambda: socket.socket(999, socket.SOCK_STREAM)))  # refused
            spare = socket.socket(family=socket.AF_UNIX)  # keyword: the Python method
            seen.append(_state(spare))
            spare.close()
            socket.setdefaulttimeout(2.5)  # a new socket's _timeout, read as it is set up
            try:
                timed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            finally:
                socket.setdefaulttimeout(None)
            seen.append(_state(timed))
            del timed._io_refs  # what close() then raises, with either path
            seen.append(_outcome(timed.close))
            timed._io_refs = 0
            timed.close()
            seen.append(_state(timed))
            client.connect(str(path))
            peer, _ = server.accept()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
            seen.append(client.sendall(b"bytes"))
            seen.append(client.sendall(bytearray(b"array")))
            seen.append(client.sendall(memoryview(b"-view-")[1:5]))
            seen.append(client.send(b"sent", 0))
            seen.append(client.sendall(data=b"keyword"))  # handed to the Python method
            seen.append(_outcome(lambda: client.sendall(12)))  # bytes(12): twelve NULs
            seen.append(_outcome(lambda: client.sendall("text")))  # bytes("text"): TypeError
            seen.append(peer.recv(4096))
            peer.sendall(b"0123456789abcdefghijklmnopqrstuvwxyz")
            seen.append(client.recv(4))
            seen.append(client.recv(4, flags=0))
            buffer = bytearray(6)
            seen.append((client.recv_into(buffer), bytes(buffer)))
            view = memoryview(bytearray(10))
            seen.append((client.recv_into(view[2:8], 3), bytes(view)))
            small = bytearray(2)
            seen.append(_outcome(lambda: client.recv_into(small, 5)))  # more than it holds
            seen.append(_outcome(lambda: client.recv_into(b"readonly")))
            seen.append(_outcome(lambda: client.recv_into(bytearray(4), -1)))
            # the 6 bytes left of the 36, then 5120 more: one read of them is a blob
            peer.sendall(bytes(range(256)) * 20)
            large, got = bytearray(8192), 0
            while got < 6 + 5120:
                got += client.recv_into(memoryview(large)[got:])
            seen.append((got, hashlib.sha256(large).hexdigest()))
            client.setblocking(False)
            seen.append(_outcome(lambda: client.recv_into(bytearray(8))))  # nothing: raises
            client.setblocking(True)
            seen.append(rt.call("outer", (), lambda: client.send(b"inside")))  # passes through
            seen.append(peer.recv(4096))
            seen.append(isinstance(type(client).__dict__.get("close"), _twin) is seen[0])
            reader = client.makefile("rb")  # a file object open: close() leaves the socket
            client.close()
            seen.append(_state(client))
            reader.close()  # the last file object: the socket is closed now, and recorded
            seen.append(_state(client))
            client.close()  # twice: nothing more happens
            seen.append(_outcome(lambda: client.connect(str(path))))  # closed: OSError 9
            seen.append(_outcome(lambda: client.setsockopt(socket.SOL_SOCKET, 7, 1)))
            seen.append(_outcome(lambda: client.recv(4)))  # recorded as raised
            odd = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # settimeout: no event, the real socket's timeout and the proxy's _timeout
            seen.append(isinstance(type(odd).__dict__.get("settimeout"), _twin) is seen[0])
            for value in (3, 2.5, -0.0, None, 0, True):  # True: not an exact int, Python's
                odd.settimeout(value)
                seen.append((odd.gettimeout(), odd._real.gettimeout(), _state(odd)))
            for bad in (-1, -0.5, float("nan"), float("inf"), "1", 10**400):
                seen.append(_outcome(lambda bad=bad: odd.settimeout(bad)))
                seen.append((odd.gettimeout(), odd._real.gettimeout()))
            odd.settimeout(value=4.0)  # a keyword: the Python method
            seen.append((odd.gettimeout(), odd._real.gettimeout()))
            odd.settimeout(None)
            seen.append(odd.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096))
            plain_real = odd._real  # the twin has met _socket.socket's setsockopt by now

            marked: list[Any] = []

            class Marked(_socket.socket):
                def setsockopt(self, *args: Any) -> None:
                    marked.append(args)

            odd._real = Marked(socket.AF_UNIX, socket.SOCK_STREAM)  # another type: its own
            seen.append(odd.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096))
            seen.append(marked)
            odd._real.close()
            odd._real = plain_real
            odd._io_refs = 1.0  # not an int: the close twin hands it to the Python method
            odd.close()
            seen.append(_state(odd))
            odd._io_refs = 0
            odd.close()
            seen.append(_state(odd))
            peer.close()
        finally:
            patcher.restore()
            server.close()

    return script


def test_socket_methods_match_the_python_ones(tmp_path: Path) -> None:
    _, stream = _both(_socket_script(tmp_path / "sock"))
    parsed = parse_stream(stream)
    assert parsed.blobs  # a recv_into of 4 KiB or more: its bytes went as a blob
    events = [e.callee for e in parsed.events]
    assert events.count("socket.sendall") == 7 and "socket.recv_into" in events  # 1 by the peer
    assert "outer" in events and events.count("socket.send") == 1  # the inner send passed
    assert events.count("socket.socket") == 6  # with the one socket.py makes in accept()
    assert events.count("socket.close") == 5  # spare, timed, client (once), odd, accepted peer


def _sqlite_script(rt: RecordRuntime, seen: list[Any]) -> None:
    patcher = Patcher()
    install_sqlite3(rt, patcher)
    try:
        conn = sqlite3.connect(":memory:")
        cursor = conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, size REAL)")
        seen.append(isinstance(type(conn).__dict__.get("execute"), _twin))
        seen.append(isinstance(type(cursor).__dict__.get("execute"), _twin) is seen[0])
        state = [(k, v) for k, v in _state(cursor) if k != "connection"]
        seen.append((state, cursor.connection is conn, type(cursor) is conn._cursor))
        fresh = conn.cursor()  # made in Python: the state a new cursor has
        seen.append([(k, v) for k, v in _state(fresh) if k != "connection"])
        for name in ("a", "it's", 'say "hi"', "é", "x" * 300):
            cur = conn.execute("INSERT INTO t (name, size) VALUES (?, ?)", (name, len(name) / 3))
            seen.append((cur.lastrowid, cur.rowcount, cur.description))
        seen.append(conn.execute("SELECT count(*) FROM t").fetchone())
        cur = conn.cursor()
        seen.append(cur.execute("SELECT id, name FROM t ORDER BY id").fetchone())
        seen.append(cur.description)
        seen.append(cur.execute(sql="SELECT 1").fetchone())  # keyword: the Python method
        seen.append(_outcome(lambda: conn.execute("SELECT * FROM nowhere")))
        conn.row_factory = sqlite3.Row
        cur = conn.execute("SELECT id, name FROM t WHERE id = ?", (2,))
        seen.append([(k, v) for k, v in _state(cur) if k != "connection"])
        row = cur.fetchone()
        seen.append((tuple(row), row.keys()))
        seen.append(conn.execute(sql="SELECT 2").fetchone())  # keyword: the Python method
        conn.commit()
        seen.append(_outcome(lambda: conn.execute("SELECT ?", (1, 2))))  # wrong binding count
    finally:
        patcher.restore()


def test_sqlite3_methods_match_the_python_ones() -> None:
    _, stream = _both(_sqlite_script)
    events = parse_stream(stream).events
    assert [e.callee for e in events].count("sqlite3.Cursor.execute") == 13
    assert sum(e.raised for e in events) == 2


class _Truth:
    """A blocking flag whose truth is asked for, or raises: acquire keys bool(blocking)."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def __bool__(self) -> bool:
        if self.value is None:
            raise ValueError("no truth")
        return self.value


def _lock_script(rt: RecordRuntime, seen: list[Any]) -> None:
    patcher = Patcher()
    install_threads(rt, patcher)
    try:
        lock, rlock = threading.Lock(), threading.RLock()
        seen.append(isinstance(type(lock).__dict__.get("acquire"), _twin))
        seen.append(isinstance(type(rlock).__dict__.get("__enter__"), _twin) is seen[0])
        seen.append((lock.acquire(), lock.locked(), lock.acquire(False), lock.acquire(0)))
        seen.append(lock.acquire(True, 0.01))  # held: times out, a float timeout
        lock.release()
        with lock:
            seen.append(lock.locked())
        seen.append(lock.acquire(blocking=False))  # a keyword: the Python method
        lock.release()
        # bool(blocking) keyed, the object itself passed on (the real lock refuses it)
        seen.append(_outcome(lambda: lock.acquire(_Truth(True), 1)))
        seen.append(_outcome(lambda: lock.acquire(_Truth(None))))  # bool() raises: no event
        seen.append(_outcome(lambda: lock.acquire(False, 1)))  # the real lock refuses
        seen.append(_outcome(lambda: lock.acquire(1, 2, 3)))  # too many: the Python method
        seen.append(lock.locked())
        with rlock, rlock:
            seen.append((rlock._is_owned(), rlock.acquire(False), rlock._recursion_count()))
            rlock.release()
        with outside_the_program():  # sealtrace's own: real, no event
            seen.append((lock.acquire(), rlock.acquire()))
            lock.release()
            rlock.release()
        condition = threading.Condition(threading.Lock())  # _is_owned: acquire(False)
        with condition:
            seen.append(condition.wait(0.001))
        event = threading.Event()
        worker = threading.Thread(target=event.set)
        worker.start()
        seen.append(event.wait(5))
        worker.join()
        seen.append(rt.call("outer", (), lambda: lock.acquire(False)))  # passes through
        lock.release()
    finally:
        patcher.restore()


def test_lock_methods_match_the_python_ones() -> None:
    seen, stream = _both(_lock_script)
    assert seen[1] == (True, True, False, False) and seen[2] is False
    callees = [e.callee for e in parse_stream(stream).events]
    assert callees.count("rlock.acquire") == 3  # two with, one acquire(False); none outside
    assert callees.count("lock.acquire") >= 10 and "outer" in callees
    assert "lock.acquire" not in callees[callees.index("outer") :]  # inside a call: passed


class _Clock:
    def __init__(self) -> None:
        self.ticks = 0

    def tick(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        self.ticks += 1
        return (self.ticks, args, sorted(kwargs.items()))


def _function_script(rt: RecordRuntime, seen: list[Any]) -> None:
    clock = _Clock()
    tick = call_wrapper(rt, "clock.tick", clock.tick)
    seen.append(isinstance(tick, _twin))
    seen.append(tick())
    seen.append(tick(1, "two", None))
    seen.append(tick(*range(20)))
    seen.append(tick(1, step=2))  # keywords: the Python wrapper
    seen.append(rt.call("outer", (), lambda: tick(3)))  # inside a call: passes through
    # keys whose repr is past a byte's varint (and two bytes'), with a result Python
    # encodes (a big int)
    seen.append(call_wrapper(rt, "big", lambda *args: 1 << 70)("k" * 200, 1))
    seen.append(tick("z" * 20_000))
    seen.append(_outcome(lambda: call_wrapper(rt, "os.fail", os.stat)("/nonexistent/x")))

    class Owner:
        method = call_wrapper(rt, "owner.method", lambda *args: len(args))

    seen.append(Owner().method(1, 2))  # it binds to an instance as the Python wrapper does
    seen.append((tick.__name__, inspect.unwrap(tick) == clock.tick))


def test_call_entries_wrappers_match_the_python_ones() -> None:
    seen, stream = _both(_function_script)
    assert seen[-2] == 3 and seen[-1] == ("tick", True)
    assert [e.callee for e in parse_stream(stream).events] == [
        "clock.tick", "clock.tick", "clock.tick", "clock.tick", "outer", "big", "clock.tick",
        "os.fail", "owner.method",
    ]  # fmt: skip


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_a_wrapper_kept_by_a_class_binds_as_its_function_does(implementation: str) -> None:
    # logging.Formatter keeps `converter = time.localtime` and calls self.converter(t): a
    # builtin never binds, so the wrapper of one must not either (gunicorn's log lines failed
    # under the recorder with "localtime() takes at most 1 argument (2 given)"); a Python
    # function binds, and so does its wrapper.
    import time

    rt = record_runtime(_Out(), implementation=implementation)
    localtime = call_wrapper(rt, "time.localtime", time.localtime)
    realpath = call_wrapper(rt, "os.path.realpath", os.path.realpath)

    class Keeper:
        builtin = localtime
        function = realpath
        real_builtin = time.localtime
        real_function = os.path.realpath

    keeper = Keeper()
    assert keeper.builtin(0.0) == keeper.real_builtin(0.0)
    for kept in (keeper.function, keeper.real_function):
        with pytest.raises(TypeError, match="not Keeper"):
            kept()  # called with the instance as its path, as the real function is


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_twins_exist_only_for_the_c_path(implementation: str) -> None:
    rt = record_runtime(_Out(), implementation=implementation)
    methods = native_methods(rt, socket.socket, {"close": Hot("socket.close", "close")})
    wrapper = native_function(rt, "os.getpid", os.getpid, os.getpid)
    assert bool(methods) == (implementation == "native") == (wrapper is not None)


def test_a_twin_refuses_what_it_cannot_stand_for() -> None:
    rt = record_runtime(_Out(), implementation="native")

    def method(self: Any, x: Any) -> Any:
        return x

    form = _fastpath.FORM_CALL
    args = ("n", "m", method, form, 1, (), False, False, ())
    with pytest.raises(TypeError, match="C per-call path"):
        _fastpath.BoundaryMethod(object(), *args)
    _fastpath.BoundaryMethod(rt, *args)  # the control: these arguments are fine
    with pytest.raises(ValueError, match="form"):
        _fastpath.BoundaryMethod(rt, "n", "m", method, 99, 1, (), False, False, ())
    with pytest.raises(ValueError, match="form"):  # state names without the state form
        _fastpath.BoundaryMethod(rt, "n", "m", method, form, 1, (), False, False, ("a",))
    with pytest.raises(ValueError, match="form"):  # a function form needs a function
        _fastpath.BoundaryMethod(rt, "n", "m", method, _fastpath.FORM_FUNCTION, 0, (), True, 0, ())
    with pytest.raises(TypeError, match="functions to describe"):  # a new form's state
        _fastpath.BoundaryMethod(rt, "n", object, method, _fastpath.FORM_NEW, 0, (), 0, 0, ("a",))
    cursor_form, close_form = _fastpath.FORM_CURSOR, _fastpath.FORM_CLOSE
    execute = _fastpath.BoundaryMethod(rt, "e", "execute", method, _fastpath.FORM_STATE, 1, (),
                                       False, False, ("rowcount",))  # fmt: skip
    proxy = type("P", (_fastpath.ProxyState,), {})
    _fastpath.BoundaryMethod(rt, "n", "cursor", method, cursor_form, 1, (), 0, 0, (proxy, execute))
    with pytest.raises(TypeError, match="cursor class"):  # no ProxyState in the cursor class
        _fastpath.BoundaryMethod(rt, "n", "c", method, cursor_form, 1, (), 0, 0, (dict, execute))
    with pytest.raises(TypeError, match="cursor class"):  # not a twin of execute's form
        _fastpath.BoundaryMethod(rt, "n", "c", method, cursor_form, 1, (), 0, 0, (proxy, method))
    with pytest.raises(ValueError, match="form"):  # close takes no arguments
        _fastpath.BoundaryMethod(rt, "n", "close", method, close_form, 1, (), 0, 0, ())
