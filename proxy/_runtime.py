"""The runtime behind every boundary adapter, and its recording implementation.

Adapters (the code installed at the call boundary) are written once, against `Runtime`:
`call(name, key, fn)` runs `fn` and records its result when recording, and serves the recorded
result without running `fn` when replaying; `output(...)` does the same for bytes the program
writes or sends. So record and replay execute the same adapter code and the program sees the
same objects either way.

RecordRuntime must never crash or block the application: a failure inside the recorder (an
unencodable value, a sink that fails or falls behind, a full disk) stops the recording, says
so once on stderr, and lets the real call's result through untouched. Calls made while another
boundary call is in progress, and calls from threads other than the one that installed the
recorder (the recorder's own sink thread), pass straight through.
"""

from __future__ import annotations

import _thread
import contextlib
import hashlib
import importlib.util
import os
import queue
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from ._codec import Encoder, UnencodableError, _write_varint
from ._store import BytesLike, RecordingSink
from ._stream import (
    ARGS_DIGEST_SIZE,
    BLOB,
    CALL,
    EXIT,
    NAME,
    NOTE,
    OUTPUT,
    STATUS_RAISED,
    STATUS_RETURNED,
    STOP,
    stream_digest,
    stream_prefix,
)

__all__ = [
    "OWN_DIRECTORIES",
    "BackgroundSink",
    "RecordRuntime",
    "Runtime",
    "args_digest",
    "caller_location",
    "is_own_code",
    "path_under",
]

T = TypeVar("T")

_EMPTY_DIGEST = hashlib.blake2b(b"", digest_size=ARGS_DIGEST_SIZE).digest()
_DRAIN_AT = 64 * 1024


def _own_directories() -> tuple[str, ...]:
    """Where sealtrace's own code lives. An editable install also puts the source tree's root
    on the package path; that root holds the project's tests and demo, which are not ours
    to skip or pass through, so only the subpackages' directories count."""
    dirs = {os.path.dirname(os.path.abspath(__file__))}
    for name in ("sandbox", "agent", "server"):
        spec = importlib.util.find_spec(f"sealtrace.{name}")
        if spec is not None and spec.submodule_search_locations:
            dirs.update(spec.submodule_search_locations)
    package = sys.modules.get("sealtrace")
    dirs.update(p for p in getattr(package, "__path__", ()) if os.path.basename(p) == "sealtrace")
    return tuple(sorted(os.path.abspath(d) for d in dirs))


OWN_DIRECTORIES = _own_directories()
_OWN_PREFIXES = tuple(d + os.sep for d in OWN_DIRECTORIES)


def is_own_code(filename: str) -> bool:
    return filename.startswith(_OWN_PREFIXES)


def path_under(path: str, roots: Iterable[str]) -> bool:
    """Whether path is one of roots or inside one."""
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


_get_ident = _thread.get_ident
_start_thread = _thread.start_new_thread  # captured before any patching
_monotonic = time.monotonic
_write_fd = os.write


_DIGEST = hashlib.blake2b(digest_size=ARGS_DIGEST_SIZE)
_FINGERPRINT = Encoder(lenient=True)
_PLAIN = frozenset((int, str, bytes, type(None), float, bool))
_RECENT_LIMIT = 4096
_recent: dict[str, bytes] = {}


def args_digest(key: Any) -> bytes:
    """A stable fingerprint of a call's arguments (objects count by their type name)."""
    if key is None or key == ():
        return _EMPTY_DIGEST
    if type(key) is tuple and _plain(key, 3):
        # Most keys are tuples of plain values (an object id, a size, a path, a statement
        # and its parameters). Their repr is exact and type-distinct (1, 1.0, True, '1',
        # b'1'), the same in every process of one Python version, and made in C; the
        # repeats among them (a socket's recv size) are remembered.
        text = repr(key)
        digest = _recent.get(text)
        if digest is None:
            hasher = _DIGEST.copy()
            hasher.update(b"r")
            hasher.update(text.encode("utf-8", "surrogatepass"))
            digest = hasher.digest()
            if len(_recent) >= _RECENT_LIMIT:
                _recent.clear()
            if len(text) <= 256:
                _recent[text] = digest
        return digest
    out = bytearray(b"e")
    _FINGERPRINT.encode(out, key)
    hasher = _DIGEST.copy()
    hasher.update(out)
    return hasher.digest()


def _plain(key: tuple[Any, ...], depth: int) -> bool:
    for item in key:
        kind = type(item)
        if kind is tuple:
            if not depth or not _plain(item, depth - 1):
                return False
        elif kind not in _PLAIN:
            return False
    return True


def caller_location() -> str:
    """file:line of the innermost frame outside sealtrace (for messages, never for events)."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if not is_own_code(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


class Runtime(Protocol):
    """What an adapter needs; RecordRuntime and sandbox's ReplayRuntime implement it."""

    replaying: bool

    def intercepting(self) -> bool: ...

    def call(self, name: str, key: Any, fn: Callable[[], T]) -> T: ...

    def output(self, name: str, key: Any, data: BytesLike, fn: Callable[[], T]) -> T: ...

    def new_oid(self) -> int: ...

    def unsupported(self, what: str) -> None: ...

    def note(self, what: str, detail: str) -> None: ...


class BackgroundSink:
    """Puts sealed objects from a thread of its own, so the application never waits on the
    store. put() raises OSError once the store has failed or falls behind by more than
    max_pending bytes; the writer's caller turns that into the end of the recording."""

    def __init__(self, sink: RecordingSink, *, max_pending: int = 64 * 1024 * 1024) -> None:
        self.location = getattr(sink, "location", "sink")
        self._sink = sink
        self._queue: queue.SimpleQueue[tuple[str, bytes] | None] = queue.SimpleQueue()
        self._pending = 0
        self._max_pending = max_pending
        self._done = _thread.allocate_lock()
        self._done.acquire()
        self.error: str | None = None
        _start_thread(self._run, ())

    def put(self, name: str, data: BytesLike) -> None:
        if self.error is not None:
            raise OSError(self.error)
        size = len(data)
        if self._pending + size > self._max_pending:
            raise OSError(
                f"the store {self.location} is more than {self._max_pending} bytes behind"
            )
        self._pending += size
        self._queue.put((name, bytes(data)))

    def close(self, timeout: float) -> str | None:
        """Wait for every queued object to be stored; the error, if any, else None."""
        self._queue.put(None)
        if not self._done.acquire(timeout=timeout):
            return f"the store {self.location} did not finish within {timeout:g}s"
        return self.error

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                name, data = item
                if self.error is None:
                    try:
                        self._sink.put(name, data)
                    except Exception as exc:
                        self.error = f"{exc.__class__.__name__}: {exc}"
                self._pending -= len(data)
        finally:
            self._done.release()


class RecordRuntime:
    """Records boundary calls into the event stream and streams it into a writer."""

    replaying = False

    def __init__(
        self,
        writer: Any,
        *,
        flush_interval: float = 2.0,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self._writer = writer  # a SealedWriter (or anything with write/flush/close/abort)
        self._buf = bytearray(stream_prefix())
        self._unhashed_from = len(self._buf)  # the prefix is not part of the stream digest
        self._scratch = bytearray()
        self._hasher = stream_digest()
        self._names: dict[str, int] = {}
        self._blobs: set[bytes] = set()
        self._enc = Encoder(self._blob)
        self._flush_interval = flush_interval
        self._last_flush = _monotonic()
        self._report = report or _report_stderr
        self._main = _get_ident()
        self.events = 0
        self.depth = 0
        self.active = True
        self.outcome: str | None = None  # None while recording; why it ended otherwise
        self._oids = 0

    # -- the Runtime interface ---------------------------------------------------------------

    def call(self, name: str, key: Any, fn: Callable[[], T]) -> T:
        return self._record_call(CALL, name, key, None, fn)

    def output(self, name: str, key: Any, data: BytesLike, fn: Callable[[], T]) -> T:
        return self._record_call(OUTPUT, name, key, data, fn)

    def _record_call(
        self, kind: int, name: str, key: Any, data: BytesLike | None, fn: Callable[[], T]
    ) -> T:
        if self.depth or not self.active or _get_ident() != self._main:
            return fn()
        self.depth = 1
        try:
            result = fn()
        except BaseException as exc:
            self.depth = 0
            self._event(kind, name, key, data, STATUS_RAISED, exc)
            raise
        self.depth = 0
        self._event(kind, name, key, data, STATUS_RETURNED, result)
        return result

    def new_oid(self) -> int:
        # Objects made inside another boundary call (a selector inside communicate()) do
        # not exist on replay: they must not take an id.
        if self.depth or _get_ident() != self._main:
            return 0
        self._oids += 1
        return self._oids

    def intercepting(self) -> bool:
        """Whether a call made here goes through the boundary (adapters that build objects
        ask before building a proxy)."""
        return self.active and not self.depth and _get_ident() == self._main

    def unsupported(self, what: str) -> None:
        if self.active and _get_ident() == self._main:
            self.stop(what, caller_location())

    def note(self, what: str, detail: str) -> None:
        if self.active:
            self.record_value(NOTE, {"what": what, "detail": detail})

    # -- records ------------------------------------------------------------------------------

    def record_raw(self, kind: int, body: BytesLike) -> bool:
        """Append one record; a failure ends the recording (False), never the application."""
        try:
            buf = self._buf
            buf.append(kind)
            _write_varint(buf, len(body))
            buf += body
            if len(buf) >= _DRAIN_AT:
                self._drain(flush=_monotonic() - self._last_flush > self._flush_interval)
        except Exception as exc:
            self.fail(f"{exc.__class__.__name__}: {exc}")
            return False
        return True

    def record_value(self, kind: int, value: Any) -> bool:
        body = bytearray()
        try:
            self._enc.encode(body, value)
        except UnencodableError as exc:
            self.fail(f"cannot encode a record: {exc}")
            return False
        return self.record_raw(kind, body)

    def _blob(self, digest: bytes, data: bytes) -> None:
        if digest not in self._blobs:
            self._blobs.add(digest)
            self.record_raw(BLOB, digest + data)

    def _callee(self, name: str) -> int:
        index = self._names[name] = len(self._names)
        self.record_value(NAME, name)
        return index

    def _event(
        self, kind: int, name: str, key: Any, data: BytesLike | None, status: int, value: Any
    ) -> None:
        try:
            index = self._names.get(name)
            if index is None:
                index = self._callee(name)
            body = self._scratch
            body.clear()
            _write_varint(body, index)
            body += _EMPTY_DIGEST if key is None else args_digest(key)
            if kind == OUTPUT:
                self._enc.encode(body, bytes(data) if data is not None else b"")
            body.append(status)
            try:
                self._enc.encode(body, value)
            except UnencodableError as exc:
                self.stop(f"the result of {name} cannot be recorded ({exc})", caller_location())
                return
            self.events += 1
            self.record_raw(kind, body)
            if not self.events & 255 and _monotonic() - self._last_flush > self._flush_interval:
                self._drain(flush=True)
        except Exception as exc:
            self.fail(f"{exc.__class__.__name__}: {exc}")

    def _drain(self, *, flush: bool = False) -> None:
        # The stream digest covers every record after the prefix; hashing whole batches
        # gives the same digest as hashing record by record, for a fraction of the calls.
        buf = self._buf
        if buf:
            self._hasher.update(memoryview(buf)[self._unhashed_from :])
            self._unhashed_from = 0
            self._writer.write(buf)
            buf.clear()
        if flush:
            self._writer.flush()
            self._last_flush = _monotonic()

    # -- endings ------------------------------------------------------------------------------

    def stop(self, reason: str, where: str) -> None:
        """End the recording early but cleanly: what was recorded stays replayable."""
        if not self.active:
            return
        if not self.record_value(STOP, {"reason": reason, "where": where, "events": self.events}):
            return
        self.active = False
        self.outcome = f"stopped: {reason} at {where}"
        self._report(f"recording stopped: {reason} at {where}; the application continues")
        self._close_writer()

    def fail(self, reason: str) -> None:
        """The recorder itself broke: abandon the recording, keep the application going."""
        if self.outcome is not None and not self.active:
            return
        self.active = False
        self.outcome = f"failed: {reason}"
        self._report(f"recording failed: {reason}; the application continues unrecorded")
        with contextlib.suppress(Exception):
            self._writer.abort()

    def finish(self, status: int | None, exception: str | None = None) -> None:
        if not self.active:
            return
        try:
            self._drain()  # hashes every record so far
        except Exception as exc:
            self.fail(f"{exc.__class__.__name__}: {exc}")
            return
        digest = self._hasher.digest()
        summary = {"status": status, "exception": exception, "events": self.events}
        if not self.record_value(EXIT, {**summary, "digest": digest}):
            return
        self.active = False
        self.outcome = "complete"
        self._close_writer()

    def _close_writer(self) -> None:
        try:
            self._drain()
            self._writer.close()
        except Exception as exc:
            self.outcome = f"failed: {exc.__class__.__name__}: {exc}"
            self._report(f"recording failed while sealing its end: {exc}")


def _report_stderr(message: str) -> None:
    # Straight to fd 2: the recorder's own messages are not part of the recorded output.
    with contextlib.suppress(OSError):
        _write_fd(2, f"sealtrace: {message}\n".encode("utf-8", "replace"))
