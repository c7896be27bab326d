"""The runtime behind every boundary adapter, and its recording implementation.

Adapters (the code installed at the call boundary) are written once, against `Runtime`:
`call(name, key, fn)` runs `fn` and records its result when recording, and serves the recorded
result without running `fn` when replaying; `output(...)` does the same for bytes the program
writes or sends. So record and replay execute the same adapter code and the program sees the
same objects either way.

RecordRuntime must never crash or block the application: a failure inside the recorder (an
unencodable value, a sink that fails or falls behind, a full disk) stops the recording, says
so once on stderr, and lets the real call's result through untouched. Calls made while another
boundary call is in progress on the same thread, and calls from threads the application did
not start (the recorder's own pipeline thread), pass straight through. The event stream is
hashed, sealed and stored by that thread (_pipeline.py), never on the application's.

Threads: every thread the application starts is recorded (start_thread gives it the next
index, as an event of its starter's, before it runs). A record is appended whole, under the
records lock, with a THREAD record before it whenever the thread differs from the last
record's, so the stream holds one order of every thread's calls: the order they completed.
Object ids are per thread (the thread's index in the high bits), so they do not depend on how
the threads interleaved.
"""

from __future__ import annotations

import _thread
import contextlib
import enum
import hashlib
import importlib.util
import os
import site
import sys
import sysconfig
import time
from collections.abc import Callable, Iterable
from types import FunctionType, ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from ._codec import (
    Encoder,
    UnencodableError,
    _write_varint,
    has_extension,
    varint,
)
from ._requests import RequestIndex
from ._store import BytesLike
from ._stream import (
    ARGS_DIGEST_SIZE,
    BLOB,
    CALL,
    CONTINUES,
    EXIT,
    FORK,
    FORKED,
    NAME,
    NOTE,
    OUTPUT,
    REQUEST,
    ROTATED,
    STATUS_RAISED,
    STATUS_RETURNED,
    STOP,
    THREAD,
    framed_record,
    stream_prefix,
)

__all__ = [
    "IMPLEMENTATIONS",
    "OWN_DIRECTORIES",
    "THREAD_SHIFT",
    "Hot",
    "PythonRecordRuntime",
    "RecordRuntime",
    "Runtime",
    "StreamOut",
    "ThreadBody",
    "WouldBlock",
    "args_digest",
    "caller_location",
    "is_own_code",
    "native_function",
    "native_methods",
    "path_under",
    "paths_under",
    "record_runtime",
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
    return paths_under(roots)(path)


def paths_under(roots: Iterable[str]) -> Callable[[str], bool]:
    """path_under(path, roots) as a function of path, for a check made at every call (each
    file a recorded program opens): the roots made into one prefix tuple once."""
    roots = tuple(roots)
    exact = frozenset(roots)
    prefixes = tuple(r.rstrip(os.sep) + os.sep for r in roots)
    return lambda path: path in exact or path.startswith(prefixes)


_get_ident = _thread.get_ident
_start_thread = _thread.start_new_thread  # captured before any patching
_RLock = _thread.RLock  # the recorder's own lock: never a recorded one
THREAD_SHIFT = 32  # an object id: the thread's index above these bits, its own count below
_monotonic = time.monotonic
_trip_again = _thread.interrupt_main  # PyErr_SetInterruptEx: the handler runs at the next check
_write_fd = os.write


_DIGEST_R = hashlib.blake2b(b"r", digest_size=ARGS_DIGEST_SIZE)  # plain keys: "r" + repr
_DIGEST_E = hashlib.blake2b(b"e", digest_size=ARGS_DIGEST_SIZE)  # others: "e" + encoding
_FINGERPRINT = Encoder(lenient=True)

# What a key holds decides how its digest is made and remembered. Equal values of the
# exact types have equal reprs; bytes, float and bool are plain as well, but 1 == 1.0 ==
# True and 0.0 == -0.0 while their reprs differ. Members of int enums (socket.SOCK_STREAM)
# are fingerprinted as their int, so equal ones fingerprint alike.
_EXACT = frozenset((int, str, type(None)))
_INEXACT = frozenset((bytes, float, bool))
_HAS_INEXACT, _HAS_INT_ENUM, _NOT_PLAIN = 1, 2, 4  # a key's shape: these bits, or none
_int_enums: set[type] = set()
_RECENT_LIMIT = 4096
_recent: dict[str, bytes] = {}  # repr of a plain key -> its digest
_recent_keys: dict[tuple[Any, ...], bytes] = {}  # an exact key -> its digest
_recent_enum_keys: dict[tuple[Any, ...], bytes] = {}  # exact but for int enums -> its digest


def args_digest(key: Any) -> bytes:
    """A stable fingerprint of a call's arguments (objects count by their type name)."""
    if type(key) is tuple:
        if not key:
            return _EMPTY_DIGEST
        for item in key:  # flat keys of exact items, the commonest, without a call
            if type(item) not in _EXACT:
                shape = _key_shape(key, 3)
                break
        else:
            shape = 0
        if not shape:
            # Most keys are tuples of ints and strs (an object id, a size, a path, a statement
            # and its parameters). Their repr is exact and type-distinct, the same in every
            # process of one Python version, and made in C; a repeated key (a socket's recv
            # size) is looked up as it is, without making its repr again.
            digest = _recent_keys.get(key)
            if digest is None:
                text = repr(key)
                digest = _repr_digest(text)
                if len(text) <= 256:
                    _remember(_recent_keys, key, digest)
            return digest
        if shape == _HAS_INEXACT:
            # Plain keys with floats, bools or bytes: repr is as exact (1, 1.0, True, '1',
            # b'1'), but such keys are remembered by their repr.
            text = repr(key)
            digest = _recent.get(text)
            if digest is None:
                digest = _repr_digest(text)
                if len(text) <= 256:
                    _remember(_recent, text, digest)
            return digest
        if shape == _HAS_INT_ENUM:
            digest = _recent_enum_keys.get(key)
            if digest is None:
                digest = _remember(_recent_enum_keys, key, _encoding_digest(key))
            return digest
    elif key is None or key == ():
        return _EMPTY_DIGEST
    return _encoding_digest(key)


def _remember(cache: dict[Any, bytes], key: Any, digest: bytes) -> bytes:
    if len(cache) >= _RECENT_LIMIT:
        cache.clear()  # start afresh rather than track which keys repeat
    cache[key] = digest
    return digest


def _repr_digest(text: str) -> bytes:
    hasher = _DIGEST_R.copy()
    hasher.update(text.encode("utf-8", "surrogatepass"))
    return hasher.digest()


def _encoding_digest(key: Any) -> bytes:
    out = bytearray()
    _FINGERPRINT.encode(out, key)
    hasher = _DIGEST_E.copy()
    hasher.update(out)
    return hasher.digest()


def _key_shape(key: tuple[Any, ...], depth: int) -> int:
    """The _HAS_* bits of what key, and the tuples in it to `depth` levels, hold; or
    _NOT_PLAIN (anything else, which is fingerprinted by its encoding every time)."""
    shape = 0
    for item in key:
        cls = type(item)
        if cls in _EXACT:
            continue
        if cls in _INEXACT:
            shape |= _HAS_INEXACT
        elif cls is tuple and depth:
            shape |= _key_shape(item, depth - 1)
        elif cls in _int_enums or _is_int_enum(cls):
            shape |= _HAS_INT_ENUM
        else:
            return _NOT_PLAIN
    return shape


def _is_int_enum(cls: type) -> bool:
    # Such a member's fingerprint is its int (Encoder._other, lenient), unless the codec
    # was taught the class; remembered, since registering one afterwards makes no sense.
    if isinstance(cls, enum.EnumMeta) and issubclass(cls, int) and not has_extension(cls):
        _int_enums.add(cls)
        return True
    return False


def caller_location() -> str:
    """file:line of the innermost frame outside sealtrace (for messages, never for events)."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        if not is_own_code(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def interpreter_trees() -> list[str]:
    """The interpreter's own trees: the standard library and the installed distributions,
    each as given and resolved. Found once, before the boundary is installed (the recorder's
    and the replay's passthrough prefixes ask first): finding them reads the environment and
    the file system, which inside the program would be calls of its own."""
    global _TREES
    if _TREES is None:
        paths = sysconfig.get_paths()
        candidates = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        candidates += [*site.getsitepackages(), site.getusersitepackages()]
        _TREES = tuple(given_and_resolved(candidates))
    return list(_TREES)


def given_and_resolved(paths: Iterable[str | None], seen: list[str] | None = None) -> list[str]:
    """Each path absolute as given and with its links resolved, once each, in order, after
    `seen` (extended in place); empty ones skipped."""
    seen = [] if seen is None else seen
    for path in paths:
        if path:
            for p in (os.path.abspath(path), os.path.realpath(path)):
                if p not in seen:
                    seen.append(p)
    return seen


_TREES: tuple[str, ...] | None = None


def application_location() -> str:
    """Where the application is, for a message that stops the recording: file:line of the
    innermost frame of the program's own code (outside sealtrace, the standard library and
    installed distributions), followed by the library line the call went through when that
    is another (multiprocessing forks inside the standard library, not at the user's line)."""
    inner = caller_location()
    trees = [t.rstrip(os.sep) + os.sep for t in interpreter_trees()]
    frame: Any = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_own_code(filename) and not filename.startswith(("<", *trees)):
            here = f"{filename}:{frame.f_lineno}"
            return here if here == inner else f"{here}, through {inner}"
        frame = frame.f_back
    return inner


class Runtime(Protocol):
    """What an adapter needs; RecordRuntime and sandbox's ReplayRuntime implement it."""

    replaying: bool

    def intercepting(self) -> bool: ...

    def call(self, name: str, key: Any, fn: Callable[[], T]) -> T: ...

    def invoke(self, name: str, key: Any, obj: Any, method: str, *args: Any) -> Any:
        """call() of obj.method(*args); the attribute is looked up only when the call runs
        (never on replay, where obj is None)."""
        ...

    def output(self, name: str, key: Any, data: BytesLike, fn: Callable[[], T]) -> T: ...

    def new_oid(self) -> int: ...

    def unsupported(self, what: str) -> None: ...

    def ended_by_signal(self, signalnum: int) -> None:
        """The program raises a signal that ends it (its default action): the recording is
        finished here with the exit status a shell gives (128 + N); on replay, the run ends
        here as at its exit."""
        ...

    def exiting(self, name: str, arg: int, status: int) -> None:
        """The program ends its process here, with call `name`(arg) and exit status `status`
        (os._exit, a signal it raised): recorded as a call, then the recording is finished;
        on replay, the run ends here as at its exit."""
        ...

    def fork(self, base: Callable[[], int]) -> int:
        """os.fork() through `base`: recorded on both sides (the child's calls in a stream of
        its own, see _stream.py's FORK and FORKED); on replay, the fork the replayed process
        made, for real where the replay goes on as the child, else its recorded pid."""
        ...

    def before_fork(self) -> None: ...

    def after_fork_in_parent(self) -> None: ...

    def after_fork_in_child(self) -> None:
        """The three at-fork handlers (os.register_at_fork), registered when the boundary is
        installed: between them the recorder settles its stream and, in the child, starts the
        child's own."""
        ...

    signal_handlers: dict[int, Any]  # the program's Python signal handlers, by number

    def deliver_signal(self, signum: int, handler: Callable[..., Any], frame: Any) -> Any:
        """A signal's Python handler, run by the interpreter (recording): its delivery is
        recorded as an event of this thread, saying whether it came inside a boundary call,
        and the handler's own calls are recorded. Never called on replay."""
        ...

    def signals_due(self) -> None:
        """On replay, run now the deliveries recorded next for this thread (a signal the
        program raised at itself); nothing when recording."""
        ...

    def note(self, what: str, detail: str) -> None: ...

    def sync(self, name: str, key: Any, fn: Callable[[], T], replay: Callable[[Any], T]) -> T:
        """A call that orders threads (a lock's acquire, a queue's get): fn() when recording,
        which records whether it returned or raised and its result if that is a bool; when
        replaying, the thread waits for its turn and replay(recorded result) answers."""
        ...

    def turn(self, name: str, key: Any, act: Callable[[], T], replay: Callable[[T], T]) -> T:
        """An event and what a thread does with state it shares with other threads, with no
        other thread's event between the two: act() when recording, recorded as the call's
        result (the records lock held across both, so another thread that records, or that
        acts in a turn of its own, waits); when replaying, replay(recorded result) at the
        event's turn, before the next event, whoever's, is served. act and replay must not
        wait for another thread."""
        ...

    def start_thread(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        base: Callable[..., int],
    ) -> int:  # fmt: skip
        """_thread.start_new_thread(function, args, kwargs) through `base`: the new thread is
        recorded (or replayed) as the next thread of the run."""
        ...

    def block(self, wait: Callable[[], T], ready: Callable[[], T | None]) -> T:
        """A wait whose end the threads' own events already order (join(): the thread's last
        event comes before its joiner's next): wait() when recording, and no event; when
        replaying, ready() until it answers (not None), letting the other threads run."""
        ...


# Turns a buffer of records as the per-call path left them into final records, on the
# pipeline's thread: (records, unhashed) -> records. The C path leaves plain keys' digests to
# it (_fastpath.finalize); the Python path needs none.
Finisher = Callable[[bytearray, int], "bytes | bytearray"]


class StreamOut(Protocol):
    """Where RecordRuntime streams its records: a StreamPipeline (see _pipeline.py)."""

    def send(
        self,
        records: bytearray,
        unhashed: int = 0,
        *,
        flush: bool = False,
        finish: Finisher | None = None,
    ) -> None: ...

    def end(self, last: Callable[[bytes], bytes] | None = None) -> None: ...

    def retire(self, last: Callable[[bytes], bytes] | None = None) -> None: ...

    def abort(self) -> None: ...


class RecordRuntime:
    """Records boundary calls into the event stream and hands it, 64 KiB at a time, to the
    pipeline that hashes, seals and stores it on its own thread.

    The per-call path (call, invoke, output and new_oid, which run on the application's
    thread for every boundary call) comes from a subclass: NativeRecordRuntime has it in C
    (sealtrace.proxy._fastpath), PythonRecordRuntime in Python; both write the same bytes.
    Build one with record_runtime(). The callee's index is kept as its encoded bytes, and
    nothing is hashed on the application's thread but the arguments (and, on the C path,
    not even those of plain keys).
    """

    replaying = False

    def __init__(
        self,
        out: StreamOut,
        *,
        flush_interval: float = 2.0,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self._out = out
        self._buf = bytearray(stream_prefix())
        self._unhashed = len(self._buf)  # the prefix is not part of the stream digest
        self._heads: dict[str, bytes] = {}  # callee name -> its index, encoded
        self._blobs: set[bytes] = set()
        self._enc = Encoder(self._blob)
        self._flush_interval = flush_interval
        self._last_flush = _monotonic()
        self._report = report or _report_stderr
        self._main = _get_ident()
        self._live = 1  # 0 once the recording has ended: every call then passes through
        self._last_thread = 0  # the thread of the last call record (a stream starts with 0's)
        self._threads_started = 0  # the highest index given to a thread
        self.events = 0
        self.active = True
        self.outcome: str | None = None  # None while recording; why it ended otherwise
        self._oids = 0  # object ids handed out, all threads together (for reports)
        self.requests = RequestIndex(self)  # fed by the sockets accept() returns
        self.signal_handlers: dict[int, Any] = {}
        self.requests_recorded = 0
        # A call is recorded when made on a recorded thread outside another boundary call:
        # the thread that installed the recorder is thread 0.
        self.enter_thread(0)

    # -- the Runtime interface ---------------------------------------------------------------

    if TYPE_CHECKING:  # the per-call path: PythonRecordRuntime, or _fastpath.CallPath in C
        # (with new_oid, which keeps to the same gate)

        def call(self, name: str, key: Any, fn: Callable[[], T]) -> T: ...

        def invoke(self, name: str, key: Any, obj: Any, method: str, *args: Any) -> Any: ...

        def output(self, name: str, key: Any, data: BytesLike, fn: Callable[[], T]) -> T: ...

        def new_oid(self) -> int: ...

        def intercepting(self) -> bool:
            """Whether a call made here goes through the boundary (adapters that build
            objects ask before building a proxy)."""
            ...

        def thread_index(self) -> int:
            """The calling thread's index in the recording, or -1 if it is not recorded."""
            ...

        def enter_thread(self, index: int) -> None: ...

        def leave_thread(self) -> None: ...

        def _hold_records(self) -> None: ...

        def _release_records(self) -> None: ...

    def unsupported(self, what: str) -> None:
        if self.active and self.thread_index() >= 0:
            self.stop(what, application_location())

    # What finishes the whole recording (the recorder's, sealtrace.proxy._recorder): set when
    # it starts; None where only the runtime records (tests of the runtime alone).
    finish_recording: Callable[[int | None, str | None], object] | None = None

    def ended_by_signal(self, signalnum: int) -> None:
        self.exiting("signal.raise_signal", signalnum, 128 + signalnum)

    def exiting(self, name: str, arg: int, status: int) -> None:
        self.call(name, (arg,), lambda: None)
        if self.finish_recording is not None:
            self.finish_recording(status, None)
        else:
            self.finish(status, None)

    # -- signals ------------------------------------------------------------------------------

    SIGNAL_DELIVERED = "signal.deliver"

    def deliver_signal(self, signum: int, handler: Callable[..., Any], frame: Any) -> Any:
        if not self.active:
            return handler(signum, frame)
        # The interpreter ran it while this thread frames a record (the recorder runs Python
        # there: a callee's first NAME, a value an extension encodes): it is tripped again
        # once the record is whole (as a signal sent twice meanwhile would be), and runs
        # then, still before the program's next instruction.
        if self._records_held() and self._defer_signal(signum):
            return None
        was_open = self._calls_open(True)
        if was_open is None:  # not a recorded thread (the main thread always is)
            return handler(signum, frame)
        try:
            # Inside a boundary call (a sleep, a select, a lock's acquire) replay runs it
            # at that call; between the program's instructions, at its thread's next call.
            during = not was_open
            self.call(self.SIGNAL_DELIVERED, (signum,), lambda: (signum, during))
            return handler(signum, frame)
        finally:
            if not was_open:
                self._calls_open(False)

    def signals_due(self) -> None:
        pass

    if TYPE_CHECKING:

        def _calls_open(self, open_: bool) -> bool | None:
            """This thread's calls recorded again (True) or passing through as inside a
            boundary call (False); what they did before, or None on a thread not recorded."""
            ...

        def _records_held(self) -> bool:
            """Whether this thread holds the records lock (it is framing a record)."""
            ...

        def _defer_signal(self, signum: int) -> bool:
            """Trip `signum` again when this thread releases the records lock; False if
            it cannot (a number past 63)."""
            ...

    # -- forks --------------------------------------------------------------------------------

    # This process's path in the recording ("" the recorded process, "1" its first child,
    # "1.2" that child's second) and how many children it has forked.
    process = ""
    _children = 0
    # Set by the recorder (sealtrace.proxy._recorder): in a forked child, makes the child's
    # own stream for its path and returns where its records go. None: forks are not recorded.
    forked: Callable[[str], StreamOut] | None = None
    _fork_pending: str | None = None  # the path of the child os.fork is making now
    _fork_at: tuple[int, int] | None = None  # (stream bytes, events) at that fork
    _fork_held = False  # the records are held between the at-fork handlers
    SETTLE_TIMEOUT = 30.0  # seconds the pipeline may take to catch up before a fork

    def fork(self, base: Callable[[], int]) -> int:
        if not self.active or self.forked is None:
            return base()
        self._children += 1
        path = f"{self.process}.{self._children}" if self.process else str(self._children)
        self._fork_pending = path
        try:
            pid = base()
        finally:
            self._fork_pending = None
        # Event k in both streams: the child's pid in the parent's, 0 in the child's.
        self.call("os.fork", (path,), lambda: pid)
        if pid and self.active:
            self.record_value(FORK, {"path": path, "event": self.events - 1})
        return pid

    def before_fork(self) -> None:
        """At-fork handler, before the fork (the program's handlers, registered later, have
        run): hold the records, hand the pipeline what is buffered and wait until it has
        sealed it all. The stream's length now is where the child's copy of it ends, and
        both processes go on from an empty buffer."""
        if self._fork_pending is None or not self.active:
            return
        self._hold_records()
        self._fork_held = True
        self._fork_at = None
        try:
            self._drain(rotate=False)
            self._fork_at = (self._out.settle(self.SETTLE_TIMEOUT), self.events)  # type: ignore[attr-defined]
        except Exception as exc:
            self._failed(exc)

    def after_fork_in_parent(self) -> None:
        if self._fork_held:
            self._fork_held = False
            self._release_records()

    def after_fork_in_child(self) -> None:
        """At-fork handler in the child. Handlers registered before the boundary ran first
        (threading's makes a lock and takes it: an event), into the buffer the fork left
        empty: those records are the child's, and its stream begins with its FORKED record,
        then them. A child not made by the program's os.fork (subprocess's preexec_fn, a C
        library's fork) records nothing."""
        held, self._fork_held = self._fork_held, False
        try:
            path, at = self._fork_pending, self._fork_at
            if not held or path is None or at is None or self.forked is None:
                self._end()
                self.outcome = "not recording"
                return
            try:
                self._out = self.forked(path)
            except Exception as exc:
                self._end()
                self._report(f"the forked process {path} is not recorded: {exc}")
                return
            offset, events = at
            fields = {"path": path, "parent": self.process, "offset": offset, "events": events}
            self._begin_stream(FORKED, fields)
            self.process, self._children = path, 0
            self._run_bytes = 0
            # Stored at once: a child killed before it flushes (a pool's worker, terminated)
            # still leaves its stream's beginning, and reads as incomplete, not as absent.
            self._drain(flush=True, rotate=False)
        finally:
            if held:
                self._release_records()

    # -- rotation -----------------------------------------------------------------------------

    # Set by the recorder (sealtrace.proxy._recorder): makes the run this one rotates to and
    # returns where its records go and its CONTINUES fields but `events` (the run, the one it
    # goes on from, the process, that run's header digest) and its location's name. None: the
    # run is not rotated. `rotate_requests`/`rotate_bytes`: after how many requests the index
    # recorded, or how many stream bytes, a run rotates (None: never).
    rotation: Callable[[], tuple[StreamOut, dict[str, Any], str] | None] | None = None
    rotate_requests: int | None = None
    rotate_bytes: int | None = None
    _run_bytes = 0  # stream bytes handed to this run's pipeline
    _run_requests = 0  # requests_recorded when this run began

    def _rotation_due(self) -> bool:
        if self.rotation is None or not self.active:
            return False
        if self.rotate_bytes is not None and self._run_bytes >= self.rotate_bytes:
            return True
        return (
            self.rotate_requests is not None
            and self.requests_recorded - self._run_requests >= self.rotate_requests
        )

    def _rotate(self) -> None:
        """Records held, the buffer just handed over (a record boundary): end this run with a
        ROTATED record and go on in the next, whose stream begins with CONTINUES. Nothing is
        lost between them: the next stream takes the very next record, and the callee names,
        blobs and threads so far stay known (its line is read after this stream). A next run
        that cannot be made leaves this one going, and rotation off (said once)."""
        make = self.rotation
        if make is None:
            return
        was_open = self._calls_open(False)  # the recorder's own calls are not the program's
        try:
            made = make()
        except Exception as exc:
            self.rotation = None
            self._report(f"the run is no longer rotated: {exc.__class__.__name__}: {exc}")
            return
        finally:
            if was_open:
                self._calls_open(True)
        if made is None:
            return  # no run ready yet: this one goes on, and rotates at the next chance
        out, continues, location = made
        ending = {"next": continues["run"], "location": location, "events": self.events}
        old, self._out = self._out, out
        old.retire(_ending_record(ROTATED, ending))
        self._begin_stream(CONTINUES, {**continues, "events": self.events})
        self.process, self._children = "", 0
        self._run_bytes, self._run_requests = 0, self.requests_recorded
        # The new run's beginning is stored at once: it reads as incomplete, not as absent.
        self._drain(flush=True, rotate=False)

    def _begin_stream(self, kind: int, fields: dict[str, Any]) -> None:
        """A new stream from here (a forked child's, FORKED; a rotated-to run's, CONTINUES):
        its prefix and first record before whatever is buffered; the prefix is unhashed."""
        prefix = stream_prefix()
        self._unhashed = len(prefix)
        self._buf = bytearray(prefix) + framed_record(kind, fields) + self._buf

    def store_now(self) -> None:
        """Seal and store what is recorded so far (a child's beginning: one killed before its
        first flush reads as incomplete, not as absent)."""
        self._hold_records()
        try:
            self._drain(flush=True, rotate=False)
        except Exception as exc:
            self._failed(exc)
        finally:
            self._release_records()

    def rotate_if_due(self) -> None:
        """Rotate now if the run is due (between requests: the request index calls it)."""
        if not self._rotation_due():
            return
        self._hold_records()
        try:
            self._drain(rotate=False)
            if self._rotation_due():
                self._rotate()
        except Exception as exc:
            self._failed(exc)
        finally:
            self._release_records()

    def sync(self, name: str, key: Any, fn: Callable[[], T], replay: Callable[[Any], T]) -> T:
        # Recorded as any call: the order of these events across threads is what replay
        # follows. The event keeps a lock's result (acquired or not), not a queue's item,
        # which the program gets as it is.
        got: list[T] = []

        def run() -> Any:
            result = fn()
            got.append(result)
            return _outcome_only(result)

        self.call(name, key, run)
        return got[0]

    def block(self, wait: Callable[[], T], ready: Callable[[], T | None]) -> T:
        return wait()

    def turn(self, name: str, key: Any, act: Callable[[], T], replay: Callable[[T], T]) -> T:
        self._hold_records()
        try:
            return self.call(name, key, act)
        finally:
            self._release_records()

    def start_thread(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
        base: Callable[..., int],
    ) -> int:  # fmt: skip
        if not self.intercepting():
            return base(function, args, kwargs)  # the recorder's own, or started by a call
        self._hold_records()
        try:
            self._threads_started = index = self._threads_started + 1
        finally:
            self._release_records()
        # Its index, as an event of its starter's, before it can make a call of its own.
        self.call("thread.spawn", (index,), lambda: index)
        runtime = self

        def run() -> None:
            runtime.enter_thread(index)
            try:
                function(*args, **kwargs)
            finally:
                runtime.leave_thread()

        body = ThreadBody(run, function)
        ident: int = self.call("thread.start", (index,), lambda: base(body, ()))
        return ident

    def note(self, what: str, detail: str) -> None:
        if self.active:
            self.record_value(NOTE, {"what": what, "detail": detail})

    def record_request(self, fields: dict[str, Any]) -> None:
        """One REQUEST record (see _requests.py); nothing once the recording has ended."""
        if self.active and self.record_value(REQUEST, fields):
            self.requests_recorded += 1
            # Between requests if the run ever is; a server never idle rotates anyway once
            # past twice the count (the requests under way go on in the next run, whole).
            limit = self.rotate_requests
            if limit is not None and (
                not self.requests.in_flight()
                or self.requests_recorded - self._run_requests >= 2 * limit
            ):
                self.rotate_if_due()

    # -- records ------------------------------------------------------------------------------

    def record_raw(self, kind: int, body: BytesLike) -> bool:
        """Append one record; a failure ends the recording (False), never the application."""
        self._hold_records()
        try:
            buf = self._buf
            if kind in (CALL, OUTPUT):
                thread = self.thread_index()
                if thread != self._last_thread:  # another thread's call: say whose
                    marker = varint(thread)
                    buf.append(THREAD)
                    _write_varint(buf, len(marker))
                    buf += marker
                    self._last_thread = thread
            buf.append(kind)
            _write_varint(buf, len(body))
            buf += body
            if len(buf) >= _DRAIN_AT:
                self._drain(flush=_monotonic() - self._last_flush > self._flush_interval)
        except Exception as exc:
            self._failed(exc)
            return False
        finally:
            self._release_records()
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

    def _callee(self, name: str) -> bytes:
        head = self._heads[name] = varint(len(self._heads))
        self.record_value(NAME, name)
        return head

    def _event(
        self,
        kind: int,
        name: str,
        key: Any,
        data: BytesLike | None,
        status: int,
        value: Any,
        head: bytes | None = None,  # callee and args digest, when call() has made them
    ) -> None:
        if not self._live:
            return  # the recording ended inside the call
        self._hold_records()
        try:
            self._event_held(kind, name, key, data, status, value, head)
        finally:
            self._release_records()

    def _event_held(
        self,
        kind: int,
        name: str,
        key: Any,
        data: BytesLike | None,
        status: int,
        value: Any,
        head: bytes | None,
    ) -> None:
        try:
            if head is None:
                head = self._heads.get(name) or self._callee(name)
                head += _EMPTY_DIGEST if key is None else args_digest(key)
            body = bytearray(head)
            if kind == OUTPUT:
                self._enc.encode(body, b"" if data is None else bytes(data))
            body.append(status)
            try:
                self._enc.encode(body, value)
            except UnencodableError as exc:
                what = f"the result of {name} cannot be recorded ({exc})"
                self.stop(what, application_location())
                return
        except Exception as exc:
            self._failed(exc)
            return
        self.events = events = self.events + 1
        if (
            self.record_raw(kind, body)
            and not events & 255
            and _monotonic() - self._last_flush > self._flush_interval
        ):
            self._drain(flush=True)

    def _failed(self, exc: Exception) -> None:
        self.fail(f"{exc.__class__.__name__}: {exc}")

    _args_digest = staticmethod(args_digest)  # for keys the per-call path does not digest
    _finish_records: Finisher | None = None  # what the pipeline does to each buffer first

    def _drain(self, *, flush: bool = False, rotate: bool = True) -> None:
        """Hand the buffer (whole records) to the pipeline; the records are held. A run due
        to rotate by size rotates here (`rotate`: the caller is the recording of a record)."""
        # The pipeline takes the buffer as it is; a new one collects what follows.
        buf, self._buf = self._buf, bytearray()
        unhashed, self._unhashed = self._unhashed, 0
        self._run_bytes += len(buf)
        self._out.send(buf, unhashed, flush=flush, finish=self._finish_records)
        if flush:
            self._last_flush = _monotonic()
        if rotate and self.rotate_bytes is not None and self._rotation_due():
            self._rotate()

    # -- endings ------------------------------------------------------------------------------

    def _end(self) -> None:
        self.active = False
        self._live = 0

    def stop(self, reason: str, where: str) -> None:
        """End the recording early but cleanly: what was recorded stays replayable."""
        if not self.active:
            return
        self.requests.close()
        if not self.record_value(STOP, {"reason": reason, "where": where, "events": self.events}):
            return
        self._end()
        self.outcome = f"stopped: {reason} at {where}"
        self._report(f"recording stopped: {reason} at {where}; the application continues")
        self._seal_end(None)

    def fail(self, reason: str) -> None:
        """The recorder itself broke: abandon the recording, keep the application going."""
        if self.outcome is not None and not self.active:
            return
        self._end()
        self.outcome = f"failed: {reason}"
        self._report(f"recording failed: {reason}; the application continues unrecorded")
        with contextlib.suppress(Exception):
            self._out.abort()

    def finish(self, status: int | None, exception: str | None = None) -> None:
        if not self.active:
            return
        self.requests.close()
        summary = {"status": status, "exception": exception, "events": self.events}
        self._end()
        self.outcome = "complete"
        self._seal_end(_ending_record(EXIT, summary))

    def _seal_end(self, last: Callable[[bytes], bytes] | None) -> None:
        try:
            self._drain(rotate=False)
            self._out.end(last)
        except Exception as exc:
            self.outcome = f"failed: {exc.__class__.__name__}: {exc}"
            self._report(f"recording failed while sealing its end: {exc}")


def _ending_record(kind: int, fields: dict[str, Any]) -> Callable[[bytes], bytes]:
    """The last record of a stream (EXIT, ROTATED) with the stream's digest, which the
    pipeline's thread makes once it has hashed every record before it."""

    return lambda digest: framed_record(kind, {**fields, "digest": digest})


class PythonRecordRuntime(RecordRuntime):
    """RecordRuntime with its per-call path in Python: the reference for the C one
    (_fastpath.CallPath, which must write the same bytes), and what records where that
    module is missing or SEALTRACE_RECORDER=python asks for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # thread ident -> [index, object ids handed out, in a boundary call now]
        self._states: dict[int, list[int]] = {}
        self._records_lock = _RLock()
        self._signals_deferred: set[int] = set()  # (_defer_signal)
        super().__init__(*args, **kwargs)

    def call(self, name: str, key: Any, fn: Callable[[], T]) -> T:
        return self._run(CALL, name, key, None, fn)

    def invoke(self, name: str, key: Any, obj: Any, method: str, *args: Any) -> Any:
        return self.call(name, key, lambda: getattr(obj, method)(*args))

    def new_oid(self) -> int:
        # Objects made inside another boundary call (a selector inside communicate()) do
        # not exist on replay: they must not take an id.
        state = self._states.get(_get_ident())
        if state is None or state[2] or not self._live:
            return 0
        self._oids += 1
        state[1] += 1
        return (state[0] << THREAD_SHIFT) | state[1]

    def intercepting(self) -> bool:
        state = self._states.get(_get_ident())
        return state is not None and not state[2] and bool(self._live)

    def thread_index(self) -> int:
        state = self._states.get(_get_ident())
        return -1 if state is None else state[0]

    def enter_thread(self, index: int) -> None:
        self._states[_get_ident()] = [index, 0, 0]

    def leave_thread(self) -> None:
        self._states.pop(_get_ident(), None)

    def _calls_open(self, open_: bool) -> bool | None:
        state = self._states.get(_get_ident())
        if state is None:
            return None
        was = not state[2]
        state[2] = 0 if open_ else 1
        return was

    def _records_held(self) -> bool:
        return bool(self._records_lock._is_owned())  # type: ignore[attr-defined]

    def _defer_signal(self, signum: int) -> bool:
        self._signals_deferred.add(signum)
        return True

    def _hold_records(self) -> None:
        self._records_lock.acquire()

    def _release_records(self) -> None:
        self._records_lock.release()
        if self._signals_deferred and not self._records_lock._is_owned():  # type: ignore[attr-defined]
            while self._signals_deferred:
                _trip_again(self._signals_deferred.pop())  # type: ignore[arg-type]  # (runs here)

    def output(self, name: str, key: Any, data: BytesLike, fn: Callable[[], T]) -> T:
        return self._run(OUTPUT, name, key, data, fn)

    def _run(
        self, kind: int, name: str, key: Any, data: BytesLike | None, fn: Callable[[], T]
    ) -> T:
        state = self._states.get(_get_ident())
        if state is None or state[2] or not self._live:
            return fn()
        state[2] = 1
        try:
            result = fn()
        except BaseException as exc:
            state[2] = 0
            self._event(kind, name, key, data, STATUS_RAISED, exc)
            raise
        state[2] = 0
        self._event(kind, name, key, data, STATUS_RETURNED, result)
        return result


class WouldBlock(Exception):
    """Raised by a sync event's replay answer when the real object is not ready yet at the
    event's turn (a lock its holder has not reached the release of, a queue item not put
    yet): the replay runtime lets the threads that can run do so, then asks again."""


def _outcome_only(result: Any) -> Any:
    """What a sync event keeps of its result: a bool as it is (a lock's acquire), nothing of
    anything else (a queue's item belongs to the program, and may be no recordable value)."""
    return result if isinstance(result, bool) else None


class ThreadBody:
    """What a recorded or replayed thread runs: the runtime's wrapper of the application's
    function, which _thread names in its messages (an exception that escapes a thread started
    with _thread.start_new_thread) and which must read as the application's own."""

    __slots__ = ("_function", "_run")

    def __init__(self, run: Callable[[], None], function: Callable[..., Any]) -> None:
        self._run = run
        self._function = function

    def __call__(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            tb = exc.__traceback__
            while tb is not None and is_own_code(tb.tb_frame.f_code.co_filename):
                tb = tb.tb_next
            raise exc.with_traceback(tb) from exc.__cause__

    def __repr__(self) -> str:
        return repr(self._function)


def _native_runtime() -> type[RecordRuntime] | None:
    try:
        from ._fastpath import CallPath, configure, encode, finalize
    except ImportError:  # not built: the Python per-call path records
        return None
    configure(_int_enums)  # shared: the enum classes Python meets, C fingerprints too

    class NativeRecordRuntime(CallPath, RecordRuntime):
        """RecordRuntime with its per-call path (call, invoke, output and the state they
        keep: the gate, the buffer, the callee heads, the event count) in C. Records of
        plain keys carry the key's repr until the pipeline's thread digests it."""

        _finish_records = staticmethod(finalize)

        def record_value(self, kind: int, value: Any) -> bool:
            # A value of built-in types (a request's REQUEST record) encoded in C, as the
            # Python encoder writes it; anything else (a blob, an extension) by that one.
            body = encode(value)
            if body is None:
                return RecordRuntime.record_value(self, kind, value)
            return self.record_raw(kind, body)

    return NativeRecordRuntime


_CO_VARARGS = 0x04  # inspect.CO_VARARGS, without importing inspect into the host process


class Hot(NamedTuple):
    """One of a proxy class's hot methods, as the C path can record it (a BoundaryMethod in
    native/src/fastpath/method.c): the callee's name, the real object's method, and what
    the method does around the call (its form)."""

    name: str
    method: Any  # its name; form "new": the real object's class
    form: str = "call"  # call | row | state | output | recv_into | new | cursor | close |
    # timeout | lock (see FORM_* in fastpath/fastpath_internal.h)
    guard: bool = False  # the Python method refuses a closed socket (self._fd < 0) first
    # form "state": the real object's attributes after the call; form "new": the functions
    # of the real object that describe it, in the proxy's recorded description; form
    # "cursor": the cursor proxy class and its execute twin; form "lock": the list whose
    # first item is not 0 while sealtrace's own code runs (_thread_boundary._outside)
    state: tuple[Any, ...] = ()


def _c_path(runtime: Runtime) -> ModuleType | None:
    """sealtrace.proxy._fastpath, when `runtime` records with it."""
    try:
        from . import _fastpath
    except ImportError:
        return None
    return _fastpath if isinstance(runtime, _fastpath.CallPath) else None


def native_methods(runtime: Runtime, cls: type, hot: dict[str, Hot]) -> dict[str, Any]:
    """C twins of cls's hot methods, for a proxy class of `runtime`, when it records with the
    C per-call path; none otherwise (a Python recorder, or replay). Each keeps cls's method as
    its reference and hands it every call it does not handle itself."""
    fast = _c_path(runtime)
    if fast is None:
        return {}
    methods = {}
    for attr, spec in hot.items():
        fallback = getattr(cls, attr)
        code = fallback.__code__
        defaults = fallback.__defaults__ or ()
        methods[attr] = fast.BoundaryMethod(
            runtime,
            spec.name,
            spec.method,
            fallback,
            getattr(fast, f"FORM_{spec.form.upper()}"),
            code.co_argcount - 1 - len(defaults),  # positional parameters after self
            defaults,
            bool(code.co_flags & _CO_VARARGS),
            spec.guard,
            spec.state,
        )
    return methods


def proxy_bases(runtime: Runtime, cls: type, state: str = "ProxyState") -> tuple[type, ...]:
    """The bases of a proxy class of `runtime` made from cls: with a state class of
    _fastpath first when it records with the C per-call path, which then holds the proxy's
    `_oid`, `_real` and `_fd` (ProxyState; CursorState holds a sqlite3 cursor's state too,
    SocketState a socket's) where its twins read and write them without a lookup; cls alone
    otherwise."""
    fast = _c_path(runtime)
    return (getattr(fast, state), cls) if fast is not None else (cls,)


def native_function(runtime: Runtime, name: str, function: Any, wrapper: Any) -> Any:
    """The C twin of `wrapper`, a call entry's Python wrapper of `function` (see
    _boundary.call_wrapper), when `runtime` records with the C per-call path; None otherwise.
    It hands calls with keyword arguments, and calls not recorded, to `wrapper`."""
    fast = _c_path(runtime)
    if fast is None:
        return None
    # A twin binds as the function does: a builtin (time.localtime) never does.
    kind = fast.BoundaryMethod if isinstance(function, FunctionType) else fast.BoundaryFunction
    return kind(runtime, name, function, wrapper, fast.FORM_FUNCTION, 0, (), True, False, ())


# The per-call paths this process has, by name; the first is the one recordings use.
IMPLEMENTATIONS: dict[str, type[RecordRuntime]] = {
    name: cls
    for name, cls in (("native", _native_runtime()), ("python", PythonRecordRuntime))
    if cls is not None
}


def record_runtime(
    out: StreamOut,
    *,
    flush_interval: float = 2.0,
    report: Callable[[str], None] | None = None,
    implementation: str | None = None,
) -> RecordRuntime:
    """A RecordRuntime with the fastest per-call path here, or the one named (by argument
    or by SEALTRACE_RECORDER); an unknown or missing name is a ValueError."""
    name = implementation or os.environ.get("SEALTRACE_RECORDER") or next(iter(IMPLEMENTATIONS))
    cls = IMPLEMENTATIONS.get(name)
    if cls is None:
        raise ValueError(
            f"no recorder implementation {name!r} here (have: {', '.join(IMPLEMENTATIONS)})"
        )
    return cls(out, flush_interval=flush_interval, report=report)


def _report_stderr(message: str) -> None:
    # Straight to fd 2: the recorder's own messages are not part of the recorded output.
    with contextlib.suppress(OSError):
        _write_fd(2, f"sealtrace: {message}\n".encode("utf-8", "replace"))
