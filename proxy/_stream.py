"""The event stream: the plaintext inside a sealed recording.

    stream  = MAGIC (8 bytes) STREAM_VERSION (u16 LE) record*
    record  = kind (u8) length (varint) body

    META    encoded dict: argv, cwd, env, hash seed, python version and flags, manifest, ...
    BLOB    32-byte SHA-256 digest, then the bytes it names (sources, large payloads)
    SOURCE  encoded (module, path, is_package, digest): an application module's source
    NAME    encoded str: the next callee index's name (index = count of NAME records so far)
    CALL    callee (varint), args digest (16 bytes), status (u8), encoded result or exception
    OUTPUT  callee (varint), args digest (16 bytes), encoded data, status (u8), encoded result
    NOTE    encoded dict: something replay should report (native code loaded, ctypes used)
    STOP    encoded dict: the recorder stopped early (fork, internal error); no CALL/OUTPUT
            follows, and replay cannot go past this point. The reader ends a recording that
            never got its end with one too (`incomplete`: incomplete_stream)
    EXIT    encoded dict: the application's exit status, event count, stream digest
    THREAD  varint: the recorded thread (0 the main one, then in the order they were started)
            that made the CALL/OUTPUT records after it, until the next THREAD
    REQUEST encoded dict: one HTTP/1.x request the program served, written when it ended
            (method, path, status, first and last event, start, duration, thread,
            complete; see _requests.py). Replay does not serve it: it is the request index
    FORK    encoded dict: the program forked process `path` ("1", "1.2", ...) with its
            `os.fork` call, event `event` of this stream (which returned the child's pid)
    FORKED  encoded dict: the first record of a forked process's own stream: its `path`, its
            parent's path, and where in its parent's stream it forked: `offset` (the byte of
            the parent's stream, from its MAGIC, that the child's copy of the stream ended
            at) and `events` (how many events the parent had recorded). The child's first
            event is its own `os.fork` call, which returned 0

    ROTATED encoded dict: the last record of a run the recorder rotated (in place of EXIT):
            the run it goes on in (`next`, its location's name `location`), how many events
            this stream's line had recorded (`events`) and the stream `digest`, as EXIT's
    CONTINUES encoded dict: the first record of a rotated-to run's stream: its own `run`,
            the run it goes on from (`previous`, whose header digest is `header`), the
            `process` of that run whose stream it continues, and `events` as ROTATED's

A forked process's stream is read after its parent's up to that offset (chain_streams): the
parent's stream cut there, then the child's whole stream, MAGIC and all. A rotated-to run's
stream is read after the whole stream it continues (which ends with ROTATED), so a run's line
is every run before it, each cut where the next goes on. Parsing the chain
continues the parent's state (callee names, blobs, threads, event numbers) into the child's
records, as the child process continued the recorder's; each stream's EXIT digest covers its
own records only.

Invariants:
1. META is the first record; EXIT, when present, is the last.
2. A BLOB precedes every reference to its digest; its bytes hash to its digest.
3. A NAME precedes the first CALL/OUTPUT that uses its index.
4. CALL/OUTPUT records are in the order the application's calls completed, across all its
   threads: replay serves and verifies them in exactly that order, each to the thread that
   made it (the last THREAD before it; none before the first means thread 0). A thread's
   index is given by the `thread.spawn` event its starter made (an index never used before),
   and a thread's CALL/OUTPUT records all follow that event.
5. EXIT's digest is BLAKE2b-256 over every record before it (kind, length and body bytes)
   in its own stream (from its MAGIC; a forked process's from its FORKED record).
   REQUEST records are inside it like any other: the index cannot be changed apart from
   the recording.
6. Values are decoded only when served, so exception classes resolve against the modules the
   replaying application has loaded by then.

Parsing never raises anything but CodecError on malformed bytes, and runs in bounded memory:
every reference to a blob decodes to the same object (bytes as stored, or one str per blob kept
in `ParsedStream.texts`), and each value keeps to the codec's budget (docs/format.md).
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from ._codec import (
    MALFORMED,
    CodecError,
    Decoder,
    Encoder,
    _write_varint,
    blob_digest,
    decode_value,
    malformed,
)
from ._format import valid_location_name, valid_process_path, validate_run_id

__all__ = [
    "ARGS_DIGEST_SIZE",
    "MAGIC",
    "MAX_THREADS",
    "STREAM_VERSION",
    "Event",
    "ParsedStream",
    "Request",
    "SourceFile",
    "chain_streams",
    "framed_record",
    "incomplete_stream",
    "parse_stream",
    "read_meta",
    "stream_prefix",
]

MAGIC = b"STRACEv\x00"
STREAM_VERSION = 5  # 2: THREAD records (a version 1 stream is one thread's); 3: REQUEST;
# 4: FORK and FORKED (forked processes' streams); 5: ROTATED and CONTINUES (rotated runs)
READ_VERSIONS = (1, 2, 3, 4, 5)
ARGS_DIGEST_SIZE = 16

(
    META, BLOB, SOURCE, NAME, CALL, OUTPUT, NOTE, STOP, EXIT, THREAD, REQUEST, FORK, FORKED,
    ROTATED, CONTINUES,
) = range(1, 16)  # fmt: skip
MAX_THREADS = 1 << 20  # a THREAD index beyond this is malformed
KIND_NAMES = {
    META: "META",
    BLOB: "BLOB",
    SOURCE: "SOURCE",
    NAME: "NAME",
    CALL: "CALL",
    OUTPUT: "OUTPUT",
    NOTE: "NOTE",
    STOP: "STOP",
    EXIT: "EXIT",
    THREAD: "THREAD",
    REQUEST: "REQUEST",
    FORK: "FORK",
    FORKED: "FORKED",
    ROTATED: "ROTATED",
    CONTINUES: "CONTINUES",
}

STATUS_RETURNED, STATUS_RAISED = 0, 1


def stream_prefix() -> bytes:
    return MAGIC + STREAM_VERSION.to_bytes(2, "little")


def framed_record(kind: int, fields: Any) -> bytes:
    """One whole record: its kind, the length of its body, and `fields` encoded as its body
    (for the records a recorder or reader makes whole at once: FORKED, CONTINUES, EXIT,
    ROTATED, a reader's STOP)."""
    body = bytearray()
    Encoder().encode(body, fields)
    record = bytearray((kind,))
    _write_varint(record, len(body))
    return bytes(record + body)


def stream_digest() -> Any:
    return hashlib.blake2b(digest_size=32)


@dataclass(frozen=True)
class SourceFile:
    module: str
    path: str
    is_package: bool
    digest: bytes


@dataclass
class Event:
    """One recorded call; `value` is the encoded result or exception, decoded on demand."""

    index: int
    callee: str
    args_digest: bytes
    raised: bool
    value: bytes
    data: bytes | None = None  # OUTPUT only: the bytes the application wrote or sent
    thread: int = 0  # the recorded thread that made the call


@dataclass(frozen=True)
class Request:
    """One entry of the request index (a REQUEST record, checked)."""

    method: str
    path: str
    status: int | None
    accepted: int  # the event of the accept() that made its connection (about)
    first: int  # event indices: the request's events lie within first..last
    last: int
    started: float  # Unix seconds
    duration: float  # seconds
    thread: int
    complete: bool

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _request(fields: dict[str, Any], events: int, start: int) -> Request:
    """A REQUEST record's fields, checked: right types, and events already recorded."""
    types: dict[str, type | tuple[type, ...]] = {
        "method": str,
        "path": str,
        "status": (int, type(None)),
        "accepted": int,
        "first": int,
        "last": int,
        "started": float,
        "duration": float,
        "thread": int,
        "complete": bool,
    }
    if set(fields) != set(types) or not all(
        isinstance(fields[k], t) and not (t is int and isinstance(fields[k], bool))
        for k, t in types.items()
    ):
        raise CodecError(f"malformed REQUEST record at byte {start}")
    ordered = 0 <= fields["accepted"] <= fields["first"] <= fields["last"]
    if not ordered or fields["last"] > max(events - 1, 0):
        raise CodecError(f"REQUEST record at byte {start} names events not recorded before it")
    if not 0 <= fields["thread"] < MAX_THREADS or len(fields["method"]) > 32:
        raise CodecError(f"malformed REQUEST record at byte {start}")
    if len(fields["path"]) > 2048 or fields["duration"] < 0:
        raise CodecError(f"malformed REQUEST record at byte {start}")
    return Request(**fields)


@dataclass
class ParsedStream:
    meta: dict[str, Any]
    blobs: dict[bytes, bytes] = field(default_factory=dict)
    sources: dict[str, SourceFile] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    notes: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)  # in the order they ended
    stop: dict[str, Any] | None = None
    exit: dict[str, Any] | None = None
    digest: bytes = b""
    texts: dict[bytes, str] = field(default_factory=dict, repr=False)  # blob -> its one str
    threads: int = 1  # how many threads the stream names (the highest index, plus one)
    thread: int = field(default=0, repr=False)  # while parsing: the last THREAD's index
    version: int = STREAM_VERSION
    # The process whose run this is: "" the recorded one, else the forked process whose
    # stream ends the chain (chain_streams); the events at which the replay becomes the
    # next process of that line (its os.fork call, served 0 in the child); the processes
    # the streams read say were forked (FORK records: path, event).
    process: str = ""
    switches: dict[int, str] = field(default_factory=dict)
    forks: list[dict[str, Any]] = field(default_factory=list)
    # The run whose stream ends the chain (META's run, or the last continuation's); the
    # ROTATED record that ends it, if the recorder rotated it; the runs the chain went on in
    # (event where each began -> its run id).
    run_id: str = ""
    rotated: dict[str, Any] | None = None
    rotations: dict[int, str] = field(default_factory=dict)

    @property
    def indexes_requests(self) -> bool:
        """Whether the recorder kept a request index (stream version 3 on)."""
        return self.version >= 3

    def request_index(self) -> list[Request]:
        """The requests in the order they began; request N is the Nth (from 1)."""
        return sorted(self.requests, key=lambda r: (r.first, r.started, r.last))

    def decode(self, event: Event) -> Any:
        return decode_value(event.value, self.blobs, texts=self.texts)


def _records(data: bytes) -> Decoder:
    """A reader positioned at the first record, after checking the magic and version."""
    prefix = stream_prefix()
    if not data.startswith(MAGIC):
        raise CodecError("not a sealtrace event stream (bad magic)")
    version = int.from_bytes(data[len(MAGIC) : len(prefix)], "little")
    if version not in READ_VERSIONS:
        raise CodecError(
            f"event stream version {version} is not supported (this reads "
            f"{', '.join(map(str, READ_VERSIONS))})"
        )
    reader = Decoder(memoryview(data))
    reader.pos = len(prefix)
    return reader


def _version(data: bytes) -> int:
    return int.from_bytes(data[len(MAGIC) : len(MAGIC) + 2], "little")


def _next_record(reader: Decoder, view: memoryview) -> tuple[int, int, memoryview]:
    """(offset, kind, body) of the record at the reader's position."""
    start = reader.pos
    kind = reader.take(1)[0]
    length = reader.varint()
    body_start = reader.pos
    if body_start + length > len(view):
        raise CodecError(f"record at byte {start} is cut short")
    reader.pos = body_start + length
    return start, kind, view[body_start : reader.pos]


def _meta(kind: int, body: memoryview) -> dict[str, Any]:
    if kind != META:
        raise CodecError("the event stream does not start with its META record")
    return _mapping(body, "META")


def read_meta(data: bytes) -> dict[str, Any]:
    """Only the META record; whoever replays the stream verifies the rest."""
    try:
        return _read_meta(data)
    except MALFORMED as exc:
        raise malformed("the event stream", exc) from exc


def _read_meta(data: bytes) -> dict[str, Any]:
    reader = _records(data)
    view = memoryview(data)
    if reader.pos >= len(view):
        raise CodecError("the event stream is empty")
    _, kind, body = _next_record(reader, view)
    return _meta(kind, body)


def parse_stream(data: bytes) -> ParsedStream:
    """Parse and structurally verify a whole event stream; CodecError (exit 4) on any fault."""
    try:
        return _parse_stream(data)
    except MALFORMED as exc:
        raise malformed("the event stream", exc) from exc


def _parse_stream(data: bytes) -> ParsedStream:
    reader = _records(data)
    view = memoryview(data)
    hasher = stream_digest()
    parsed: ParsedStream | None = None
    names: list[str] = []
    stream_start = 0  # where the stream being read began (a forked process's: its MAGIC)
    while reader.pos < len(view):
        if parsed is not None and view[reader.pos : reader.pos + len(MAGIC)] == MAGIC:
            stream_start = _enter_stream(parsed, reader, view, stream_start)
            hasher = stream_digest()  # from the FORKED or CONTINUES record on: its own
            hasher.update(view[stream_start + len(stream_prefix()) : reader.pos])
            continue
        start, kind, body = _next_record(reader, view)
        if parsed is None:
            parsed = ParsedStream(meta=_meta(kind, body), version=_version(data))
            run_id = parsed.meta.get("run_id")
            parsed.run_id = run_id if isinstance(run_id, str) else ""
        elif parsed.exit is not None:
            raise CodecError("records follow EXIT")
        elif parsed.rotated is not None:
            raise CodecError("records follow ROTATED")
        elif kind in (EXIT, ROTATED):
            ending = _mapping(body, KIND_NAMES[kind])
            parsed.digest = hasher.digest()
            if ending.get("digest") != parsed.digest:
                raise CodecError(
                    f"the event stream digest does not match its {KIND_NAMES[kind]} record"
                )
            if kind == EXIT:
                parsed.exit = ending
            else:
                _rotated(parsed, ending, start)
            continue
        else:
            _parse_record(parsed, kind, body, names, start)
        hasher.update(view[start : reader.pos])
    if parsed is None:
        raise CodecError("the event stream is empty")
    if parsed.exit is None:
        parsed.digest = hasher.digest()
    return parsed


def _rotated(parsed: ParsedStream, fields: dict[str, Any], start: int) -> None:
    """A ROTATED record, checked: the run ends here and goes on in another (replay stops
    here: the continuation's line replays on)."""
    nxt, location, events = fields.get("next"), fields.get("location"), fields.get("events")
    if (
        set(fields) != {"next", "location", "events", "digest"}
        or not _run_id(nxt)
        or not isinstance(location, str)
        or not valid_location_name(location)
        or events != len(parsed.events)
    ):
        raise CodecError(f"malformed ROTATED record at byte {start}")
    parsed.rotated = fields
    parsed.stop = {
        "reason": f"the recorder rotated the run: it goes on in run {nxt}",
        "where": f"the end of run {parsed.run_id}",
        "events": events,
        "continued_in": nxt,
    }


def _run_id(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        validate_run_id(value)
    except ValueError:
        return False
    return True


def _enter_stream(
    parsed: ParsedStream, reader: Decoder, view: memoryview, before_start: int
) -> int:
    """At a MAGIC inside the chain: check the stream that begins here (its version, its first
    record: FORKED for a forked process's, CONTINUES for a rotated-to run's; that it goes on
    from the stream before it where that one forked or ended) and read on in it. Its start;
    the reader is left after that first record."""
    start = reader.pos
    version = int.from_bytes(view[start + len(MAGIC) : start + len(MAGIC) + 2], "little")
    if version < 4 or version not in READ_VERSIONS:
        raise CodecError(f"the chained stream at byte {start} has version {version}")
    reader.pos = start + len(stream_prefix())
    if reader.pos >= len(view):
        raise CodecError(f"the chained stream at byte {start} is empty")
    _, kind, body = _next_record(reader, view)
    if kind == CONTINUES:
        _enter_continued(parsed, _mapping(body, "CONTINUES"), start)
        return start
    if parsed.exit is not None or parsed.stop is not None:
        raise CodecError(f"a forked process's stream at byte {start} follows its parent's end")
    if kind != FORKED:
        raise CodecError(f"the chained stream at byte {start} has no FORKED or CONTINUES record")
    _enter_forked(parsed, _mapping(body, "FORKED"), start, before_start)
    return start


def _enter_continued(parsed: ParsedStream, fields: dict[str, Any], start: int) -> None:
    """A rotated-to run's stream: it must go on from exactly where the run before it ended."""
    run, previous, process = fields.get("run"), fields.get("previous"), fields.get("process")
    header = fields.get("header")
    if (
        set(fields) != {"run", "previous", "process", "header", "events"}
        or not _run_id(run)
        or not isinstance(process, str)
        or not isinstance(header, bytes)
        or len(header) != 32
    ):
        raise CodecError(f"malformed CONTINUES record at byte {start}")
    rotated = parsed.rotated
    if (
        rotated is None
        or rotated.get("next") != run
        or previous != parsed.run_id
        or process != parsed.process
        or fields.get("events") != len(parsed.events)
    ):
        raise CodecError(f"run {run}'s stream does not go on from where the run before it ended")
    assert isinstance(run, str)  # (_run_id checked it)
    parsed.run_id = run
    parsed.process = ""
    parsed.rotated = parsed.stop = None
    parsed.rotations[len(parsed.events)] = run


def _enter_forked(
    parsed: ParsedStream, forked: dict[str, Any], start: int, parent_start: int
) -> None:
    """A forked process's stream: it must go on from its parent's where the parent forked."""
    path, parent = forked.get("path"), forked.get("parent")
    if (
        set(forked) != {"path", "parent", "offset", "events"}
        or not isinstance(path, str)
        or not valid_process_path(path)
        or parent != parsed.process
        or not path.startswith(f"{parent}." if parent else "")
        or "." in path[len(parent) + 1 if parent else 0 :]
    ):
        raise CodecError(f"malformed FORKED record at byte {start}")
    if forked.get("offset") != start - parent_start or forked.get("events") != len(parsed.events):
        raise CodecError(
            f"process {path}'s stream does not continue its parent's where the parent forked"
        )
    parsed.process = path
    parsed.switches[len(parsed.events)] = path


INCOMPLETE_REASON = (
    "the recording ends here, incomplete: the process ended without finishing it (killed, "
    "or its store failed)"
)


def incomplete_stream(data: bytes) -> bytes:
    """The stream of a recording that never got its end (its final chunk), as far as it goes:
    cut after its last whole record, then a STOP saying it ends there. Replay then matches
    every event up to that point and stops, as at any STOP; questions are answered up to it.
    Made by the reader, not read from the recording (a recording can hold a STOP of its own:
    nothing here is more trusted than that). CodecError if not even META is whole."""
    try:
        reader = _records(data)
        view = memoryview(data)
        end = events = 0
        while reader.pos < len(view):
            if end and view[reader.pos : reader.pos + len(MAGIC)] == MAGIC:
                if len(view) - reader.pos < len(stream_prefix()):
                    break
                reader.pos += len(stream_prefix())
                continue
            try:
                _, kind, _body = _next_record(reader, view)
            except MALFORMED:
                break  # the record the recording was cut in
            end = reader.pos
            events += kind in (CALL, OUTPUT)
            if kind in (EXIT, STOP, ROTATED):
                return data  # (it has its end after all)
    except MALFORMED as exc:
        raise malformed("the event stream", exc) from exc
    if not end:
        raise CodecError("the recording ends before its first record is whole")
    stop = {"reason": INCOMPLETE_REASON, "where": f"event {events}", "events": events,
            "incomplete": True}  # fmt: skip
    return bytes(data[:end]) + framed_record(STOP, stop)


def chain_streams(streams: list[bytes]) -> bytes:
    """One event stream for the last of a line of processes (the recorded one, its child,
    that child's child, ...), each stream whole as stored: every stream but the last cut
    where the next one's FORKED record says that process forked, then the last whole.
    CodecError if a child's stream does not begin as one, or its parent's was cut short
    before the fork (parse_stream checks the rest)."""
    parts: list[bytes | memoryview] = []
    for parent, child in itertools.pairwise(streams):
        offset = _fork_offset(child)
        if offset is None:  # a rotated-to run's: it goes on after the whole stream before it
            parts.append(parent)
            continue
        if offset > len(parent):
            raise CodecError(
                "the parent's stream ends before the fork its child's stream continues from"
            )
        parts.append(memoryview(parent)[:offset])
    parts.append(streams[-1])
    return b"".join(parts)


def _fork_offset(stream: bytes) -> int | None:
    """Where in the stream before it a forked process's stream goes on from; None for a
    rotated-to run's (after the whole of it)."""
    try:
        reader = _records(stream)
        view = memoryview(stream)
        _, kind, body = _next_record(reader, view)
        if kind == CONTINUES:
            return None
        offset = _mapping(body, "FORKED").get("offset") if kind == FORKED else None
    except MALFORMED as exc:
        raise malformed("a chained stream", exc) from exc
    if type(offset) is not int or offset < len(stream_prefix()):
        raise CodecError("a chained stream begins with neither FORKED nor CONTINUES")
    return offset


def _mapping(body: memoryview, what: str) -> dict[str, Any]:
    value = decode_value(bytes(body))
    if not isinstance(value, dict):
        raise CodecError(f"{what} is not a mapping")
    return value


def _parse_record(
    parsed: ParsedStream, kind: int, body: memoryview, names: list[str], start: int
) -> None:
    if parsed.stop is not None and kind in (CALL, OUTPUT):
        raise CodecError("calls follow STOP")
    if kind == BLOB:
        digest, payload = bytes(body[:32]), bytes(body[32:])
        if len(digest) != 32 or blob_digest(payload) != digest:
            raise CodecError(f"blob at byte {start} does not match its digest")
        parsed.blobs[digest] = payload
    elif kind == SOURCE:
        value = decode_value(bytes(body))
        if not (isinstance(value, tuple) and len(value) == 4):
            raise CodecError("malformed SOURCE record")
        module, path, is_package, digest = value
        if digest not in parsed.blobs:
            raise CodecError(f"source of {module!r} refers to a missing blob")
        parsed.sources[module] = SourceFile(module, path, bool(is_package), digest)
    elif kind == NAME:
        name = decode_value(bytes(body))
        if not isinstance(name, str):
            raise CodecError("malformed NAME record")
        names.append(name)
    elif kind in (CALL, OUTPUT):
        parsed.events.append(_parse_event(parsed, kind, body, names))
    elif kind == NOTE:
        parsed.notes.append(_mapping(body, "NOTE"))
    elif kind == STOP:
        parsed.stop = _mapping(body, "STOP")
    elif kind == REQUEST:
        parsed.requests.append(_request(_mapping(body, "REQUEST"), len(parsed.events), start))
    elif kind == FORK:
        fork = _mapping(body, "FORK")
        path, event = fork.get("path"), fork.get("event")
        if (
            set(fork) != {"path", "event"}
            or not isinstance(path, str)
            or not valid_process_path(path)
            or not path
            or type(event) is not int
            or not 0 <= event < len(parsed.events)
        ):
            raise CodecError(f"malformed FORK record at byte {start}")
        parsed.forks.append(fork)
    elif kind in (FORKED, CONTINUES):
        raise CodecError(
            f"a {KIND_NAMES[kind]} record at byte {start} does not begin a chained stream"
        )
    elif kind == THREAD:
        dec = Decoder(body)
        index = dec.varint()
        if dec.pos != len(body) or index >= MAX_THREADS:
            raise CodecError(f"malformed THREAD record at byte {start}")
        parsed.thread = index
        parsed.threads = max(parsed.threads, index + 1)
    else:
        raise CodecError(f"unknown record kind {kind} at byte {start}")


def _parse_event(parsed: ParsedStream, kind: int, body: memoryview, names: list[str]) -> Event:
    dec = Decoder(body, parsed.blobs, texts=parsed.texts)
    callee_index = dec.varint()
    if callee_index >= len(names):
        raise CodecError("a call names a callee that was never defined")
    digest = dec.take(ARGS_DIGEST_SIZE)
    data = None
    if kind == OUTPUT:
        data = dec.decode()
        if not isinstance(data, bytes):
            raise CodecError("OUTPUT data is not bytes")
    status = dec.take(1)[0]
    if status not in (STATUS_RETURNED, STATUS_RAISED):
        raise CodecError("bad call status")
    value_start = dec.pos
    dec.decode()  # structural check now; the value itself is decoded when served
    if dec.pos != len(body):
        raise CodecError("trailing bytes in a call record")
    return Event(
        index=len(parsed.events),
        callee=names[callee_index],
        args_digest=digest,
        raised=status == STATUS_RAISED,
        value=bytes(body[value_start:]),
        data=data,
        thread=parsed.thread,
    )
