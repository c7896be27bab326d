"""Opening any recording runs in bounded memory and ends in success or an IntegrityError.

The property (docs/format.md, "Memory budget"): whatever bytes a recording holds, decoding a
value, parsing an event stream (and serving its events) and reading segments from a store
either succeed or raise a sealtrace IntegrityError (CodecError, TamperedError, ...), exit 4.
Never another exception, and never by running out of memory: every fuzz loop runs in a child
process whose address space is capped at CAP, and an IntegrityError that was caused by a
MemoryError counts as a failure.

Each loop is also an oracle for the budget itself: a value that decodes must come out within
DECODE_FACTOR x its length + DECODE_BASE bytes, counted as the codec counts them (within_budget),
a reference to a blob costing one pointer only when it is the stream's one object for that blob.

The event stream loop (fuzz_stream) must fail on its own when a past fix is undone: the
parser's or the decoder's turning of other exceptions into a CodecError, the per-value budget,
the one str per blob. So it changes streams through their records as well as their bytes
(structured_stream: a hostile value where a record's value belongs, records inserted, dropped,
duplicated or swapped, framing and EXIT digest kept right, so that the parser and the decoder
meet every change instead of stopping at the first bad length), and serves the values as
replay does, after the replayed program has imported more modules (LateGroup). It runs fixed
seeds (random.Random(seed), seeds 0..STREAM_SEEDS-1): every run sees the same streams, each of
the four undone fixes fails on several of them, in bounded time.
The hypothesis loops are derandomized, keep no example database and do not shrink, so they too
are the same on every run and end in bounded time.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sealtrace.proxy import LocalDirStore, SealedReader, SealedWriter
from sealtrace.proxy._codec import (
    DECODE_BASE,
    DECODE_FACTOR,
    T_BLOB_BYTES,
    T_BLOB_STR,
    T_DICT,
    T_EXCEPTION,
    T_EXTENSION,
    T_FROZENSET,
    T_LIST,
    T_SET,
    T_STR,
    T_TUPLE,
    CodecError,
    decode_value,
    encode_value,
    varint,
)
from sealtrace.proxy._errors import IntegrityError, TamperedError
from sealtrace.proxy._format import (
    CHUNK_PREFIX,
    FLAG_FINAL,
    FLAG_SEGMENT_END,
    FORMAT_VERSION,
    MAX_CHUNK_SIZE,
    MAX_SEGMENT_SIZE,
    MIN_CHUNK_SIZE,
    SEGMENT_HEADER,
    SEGMENT_MAGIC,
    TAG_SIZE,
    RecordingHeader,
    header_digest,
    wrap_recording_key,
)
from sealtrace.proxy._keys import Identity, Recipient, generate_identity, write_keypair
from sealtrace.proxy._stream import (
    BLOB,
    CALL,
    EXIT,
    META,
    NAME,
    NOTE,
    OUTPUT,
    SOURCE,
    STOP,
    ParsedStream,
    parse_stream,
)
from sealtrace.proxy._stream import stream_prefix as _prefix

CAP = 512 * 1024 * 1024  # the address-space cap of every child below (docs/format.md)
EXAMPLES = 250
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    # No shrinking: a failure is reported as found, so the loop ends in bounded time.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

BIG_TEXT = "sealtrace " * 10_000  # past BLOB_THRESHOLD: stored once as a blob, then referenced
BIG_BYTES = bytes(range(256)) * 20
HUGE = 1 << 62


# --- running a check under the memory cap --------------------------------------------------

_CHILD = """
import importlib.util, resource, sys
cap = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
spec = importlib.util.spec_from_file_location("fuzz_child", sys.argv[2])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
getattr(module, sys.argv[3])()
# This process's own peak (VmHWM): getrusage's ru_maxrss keeps, across exec, the peak of the
# process that forked it (a test session grown large would count against the check).
status = open("/proc/self/status").read()
print(int(status.split("VmHWM:")[1].split()[0]) * 1024)
"""


def run_capped(name: str) -> int:
    """Run this module's function `name` in a child capped at CAP; its peak RSS in bytes."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(CAP), __file__, name],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    peak = int(proc.stdout.split()[-1])
    assert peak < CAP
    return peak


def opens_or_refuses(action: Callable[[], Any]) -> None:
    """The property: success, or an IntegrityError that memory exhaustion did not cause."""
    refused: IntegrityError | None = None
    try:
        action()
    except IntegrityError as exc:
        refused = exc
    cause: BaseException | None = refused
    while cause is not None:
        assert not isinstance(cause, MemoryError), f"ran out of memory: {refused}"
        cause = cause.__cause__ or cause.__context__
    assert "\n" not in str(refused or ""), "an integrity error is one line"


_POINTER = 8  # what the codec charges for a reference to an object it did not make


def charged(value: Any, shared: AbstractSet[int]) -> int:
    """At most what the codec charged for decoding `value`: sys.getsizeof plus a pointer for
    every object it made (per occurrence, as it makes them), a pointer for one of the stream's
    shared objects (a blob's bytes, its one str). None, True and False cost nothing."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if item is None or item is True or item is False:
            continue
        if id(item) in shared:
            total += _POINTER
            continue
        total += sys.getsizeof(item) + _POINTER
        kind = type(item)
        if kind in (list, tuple, set, frozenset):
            stack.extend(item)
        elif kind is dict:
            stack.extend(item.keys())
            stack.extend(item.values())
    return total


def within_budget(value: Any, encoded_length: int, shared: AbstractSet[int] = frozenset()) -> None:
    """The budget of docs/format.md: a value that decodes takes at most DECODE_FACTOR x its
    encoded length + DECODE_BASE bytes, a blob reference one pointer."""
    cost, budget = charged(value, shared), DECODE_FACTOR * encoded_length + DECODE_BASE
    assert cost <= budget, f"a {encoded_length}-byte value decoded to {cost} bytes (> {budget})"


# --- building and mutating encodings -------------------------------------------------------


def _blobs_and_encoding(value: Any) -> tuple[dict[bytes, bytes], bytes]:
    blobs: dict[bytes, bytes] = {}
    return blobs, encode_value(value, blobs.__setitem__)


def _ref(tag: int, raw: bytes) -> bytes:
    return bytes((tag,)) + hashlib.sha256(raw).digest()


def _record(kind: int, body: bytes) -> bytes:
    return bytes((kind,)) + varint(len(body)) + body


def build_stream(records: list[tuple[int, bytes]], *, with_exit: bool = True) -> bytes:
    out = bytearray(_prefix())
    hasher = hashlib.blake2b(digest_size=32)
    for kind, body in records:
        rec = _record(kind, body)
        hasher.update(rec)
        out += rec
    if with_exit:
        out += _record(EXIT, encode_value({"status": 0, "digest": hasher.digest()}))
    return bytes(out)


def _call(value_encoding: bytes, callee: int = 0) -> bytes:
    return varint(callee) + b"\x07" * 16 + b"\x00" + value_encoding


def _output(data: bytes, value_encoding: bytes) -> bytes:
    return varint(0) + b"\x07" * 16 + encode_value(data) + b"\x00" + value_encoding


scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.sampled_from([BIG_TEXT, BIG_BYTES, ValueError("x", 1), OSError(2, "gone", "/f")])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


MUTATIONS = ["flip", "cut", "insert", "refs", "sets", "length", "nest", "typed"]
PIECES = ["refs", "sets", "typed", "length", "nest"]
# Where a value belongs (hostile()), the pieces that reach furthest are the likelier ones.
VALUE_PIECES = ["refs", "refs", "sets", "sets", "typed", "typed", "late", "length", "nest"]


def mutate(rng: random.Random, raw: bytes, refs: list[bytes]) -> bytes:
    """raw with one to three mutations: bit flips, cuts, insertions, or a hostile piece
    (duplicated blob references, an empty-set bomb, a huge declared length, deep nesting, a
    registered type or an exception class given the wrong fields) at a random offset."""
    data = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(data))
        op = rng.choice(MUTATIONS)
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << rng.randrange(8)
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op in PIECES:
            data[pos:pos] = piece(rng, op, refs)
    return bytes(data)


def mutated(raw: bytes, refs: list[bytes]) -> st.SearchStrategy[bytes]:
    """mutate() as a strategy: the example picks the seed, the mutations are uniform."""
    return st.integers(0, 2**32 - 1).map(lambda seed: mutate(random.Random(seed), raw, refs))


def piece(rng: random.Random, op: str, refs: list[bytes]) -> bytes:
    """One hostile encoding of the kind `op` names (empty when it needs refs and has none)."""
    if op == "refs":  # many references to one blob: one object each, or a copy each?
        if not refs:
            return b""
        count = rng.choice([2, 100, 20_000])
        return bytes((rng.choice([T_LIST, T_TUPLE]),)) + varint(count) + rng.choice(refs) * count
    if op == "sets":  # 2 bytes each, over 200 bytes each decoded: past the budget from ~11k
        count = rng.choice([3, 20_000])
        empty = bytes((rng.choice([T_SET, T_FROZENSET]), 0))
        return bytes((rng.choice([T_LIST, T_TUPLE]),)) + varint(count) + empty * count
    if op == "length":
        tag = rng.choice([T_STR, T_LIST, T_TUPLE, 4, 8, 9])
        return bytes((tag,)) + varint(rng.choice([HUGE, 2**31, 2**20]))
    if op == "nest":
        return bytes((T_LIST, 1)) * rng.randint(1, 400) + encode_value(None)
    if op == "late":  # a class the program loads after the parse (see _open_stream)
        args = encode_value(tuple(random_scalar(rng) for _ in range(rng.randint(0, 3))))
        return _exc(f"{LATE_MODULE.__name__}:LateGroup", args)
    assert op == "typed"  # a registered type or a loaded exception class, wrong fields
    args = encode_value(tuple(random_scalar(rng) for _ in range(rng.randint(0, 3))))
    if rng.random() < 0.5:
        return bytes((T_EXTENSION,)) + encode_value(rng.choice(EXTENSIONS)) + args
    return _exc(rng.choice(EXCEPTIONS), args)


def hostile(rng: random.Random, refs: list[bytes]) -> bytes:
    """An encoding to put where a value belongs: a valid one, a valid one mutated, or a
    hostile piece alone, as an item of a list or as a mapping's value."""
    how = rng.choice(["valid", "mutated", "piece", "piece", "item", "item", "mapping", "mapping"])
    if how == "valid":
        return encode_value(random_value(rng))
    if how == "mutated":
        return mutate(rng, encode_value(random_value(rng)), refs)
    bad = piece(rng, rng.choice(VALUE_PIECES), refs)
    if how == "item":
        return bytes((T_LIST, 2)) + encode_value(1) + bad
    if how == "mapping":
        return bytes((T_DICT, 1)) + encode_value("detail") + bad
    return bad


SCALARS: list[Any] = [None, True, False, 0, -1, 300, 2**64, -(2**70), 1.5, -0.0, float("nan")]
SCALARS += [float("-inf"), "", "é", "\ud800", "x" * 200, b"", b"\x00\xff", BIG_TEXT, BIG_BYTES]
SCALARS += [ValueError("x", 1), OSError(2, "gone", "/f")]


def random_scalar(rng: random.Random) -> Any:
    return rng.choice(SCALARS)


def random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.5:
        return random_scalar(rng)
    items = [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if roll < 0.7:
        return items
    if roll < 0.85:
        return tuple(items)
    return {f"k{i}": item for i, item in enumerate(items)}


EXTENSIONS = ["timedelta", "date", "datetime", "time", "timezone", "uuid", "stat_result"]
EXTENSIONS += ["struct_time", "times_result", "uname_result", "terminal_size"]
EXCEPTIONS = ["builtins:ExceptionGroup", "builtins:BaseExceptionGroup", "builtins:OSError"]
EXCEPTIONS += ["builtins:UnicodeDecodeError", "builtins:SystemExit", "builtins:StopIteration"]


def _exc(qualified: str, args: bytes) -> bytes:
    return bytes((T_EXCEPTION,)) + encode_value(qualified) + args + encode_value({})


def _refs(blobs: dict[bytes, bytes]) -> list[bytes]:
    return [bytes((tag,)) + d for d in blobs for tag in (T_BLOB_STR, T_BLOB_BYTES)]


# --- (a) the codec -------------------------------------------------------------------------


@FUZZ
@given(st.data(), values)
def fuzz_codec(data: st.DataObject, value: Any) -> None:
    blobs, raw = _blobs_and_encoding(value)
    bad = data.draw(mutated(raw, _refs(blobs)))
    texts: dict[bytes, str] = {}

    def decode() -> None:
        decoded = decode_value(bad, blobs, texts=texts)
        shared = {id(raw) for raw in blobs.values()} | {id(t) for t in texts.values()}
        within_budget(decoded, len(bad), shared)

    opens_or_refuses(decode)


def test_codec_fuzz_under_a_memory_cap() -> None:
    run_capped("fuzz_codec")


# --- (b) the event stream parser -----------------------------------------------------------

SOURCE_TEXT = b"def main():\n    return 1\n" * 200  # past BLOB_THRESHOLD: stored as a blob
SOURCE_DIGEST = hashlib.sha256(SOURCE_TEXT).digest()


def _stream_records(value: Any) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    """The records of a valid stream with every kind a recording holds (its EXIT apart), one
    call returning `value`; and references to its blobs (a str and a bytes one at least)."""
    blobs, value_raw = _blobs_and_encoding(value)
    big_raw = encode_value([BIG_TEXT, BIG_BYTES], blobs.__setitem__)
    blobs[SOURCE_DIGEST] = SOURCE_TEXT
    records = [(META, encode_value({"argv": ["app.py"], "cwd": "/", "env": {"LANG": "C"}}))]
    records += [(BLOB, digest + payload) for digest, payload in blobs.items()]
    records += [
        (SOURCE, encode_value(("app", "/app/app.py", False, SOURCE_DIGEST))),
        (NAME, encode_value("time.time")),
        (CALL, _call(value_raw)),
        (OUTPUT, _output(b"written", encode_value(7))),
        (NOTE, encode_value({"kind": "ctypes", "detail": "loaded"})),
        (CALL, _call(big_raw)),
    ]
    return records, _refs(blobs)


def _valid_stream(value: Any, with_exit: bool) -> tuple[bytes, list[bytes]]:
    records, refs = _stream_records(value)
    return build_stream(records, with_exit=with_exit), refs


KINDS = [META, BLOB, SOURCE, NAME, CALL, OUTPUT, NOTE, STOP, EXIT, 0, 10, 255]
# What a SOURCE record's four fields may be: right, wrong-typed, or unhashable.
SOURCE_FIELDS: list[Any] = ["app", "/app/app.py", False, SOURCE_DIGEST, [], {}, ["x"], None]


def _body(rng: random.Random, kind: int, refs: list[bytes]) -> bytes:
    """A record body of `kind` whose framing is right and whose value may be anything."""
    if kind in (CALL, OUTPUT):
        head = varint(rng.choice([0, 0, 1, 2**40])) + b"\x07" * 16
        if kind == OUTPUT:
            head += hostile(rng, refs)
        return head + bytes((rng.choice([0, 0, 1, 2]),)) + hostile(rng, refs)
    if kind == SOURCE and rng.random() < 0.75:
        return encode_value(tuple(rng.choice(SOURCE_FIELDS) for _ in range(4)))
    if kind == BLOB:
        return rng.choice([SOURCE_DIGEST, b"\x01" * 32]) + rng.randbytes(rng.randint(0, 40))
    if kind in KINDS[:9]:
        return hostile(rng, refs)
    return rng.randbytes(rng.randint(0, 40))


def structured_stream(rng: random.Random) -> bytes:
    """A stream whose records were changed, not its bytes: two times in three a call's value
    replaced by a hostile one, else the value of a record of any kind; then up to two records
    changed, inserted, dropped, duplicated, swapped or mutated inside. Framing and the EXIT
    digest stay right, so the parser and the decoder meet every change."""
    records, refs = _stream_records(random_value(rng))
    if rng.random() < 2 / 3:
        at = rng.choice([i for i, (kind, _) in enumerate(records) if kind == CALL])
        records[at] = (CALL, _call(hostile(rng, refs)))
        changes = int(rng.random() < 0.3)
    else:  # each kind as likely as the others
        kind = rng.choice(sorted({kind for kind, _ in records}))
        at = rng.choice([i for i, (k, _) in enumerate(records) if k == kind])
        records[at] = (kind, _body(rng, kind, refs))
        changes = rng.randint(0, 2)
    for _ in range(changes):
        op = rng.choice(["value", "insert", "drop", "copy", "swap", "body"])
        at = rng.randrange(len(records))
        kind, body = records[at]
        if op == "value":
            records[at] = (kind, _body(rng, kind, refs))
        elif op == "insert":
            new = rng.choice(KINDS)
            records.insert(at, (new, _body(rng, new, refs)))
        elif op == "drop" and len(records) > 1:
            del records[at]
        elif op == "copy":
            records.insert(at, records[at])
        elif op == "swap":
            other = rng.randrange(len(records))
            records[at], records[other] = records[other], records[at]
        elif op == "body":
            records[at] = (kind, mutate(rng, body, refs))
    return build_stream(records, with_exit=rng.random() < 0.5)


class LateGroup(ExceptionGroup[Exception]):
    """An exception class of a module the replayed program imports only after the stream was
    parsed: a value naming it decodes as a RecordedException at parse time, as this class
    (whose constructor checks its arguments) when served (the stream's invariant 6)."""


LATE_MODULE = types.ModuleType("sealtrace_fuzz_late")
LATE_MODULE.LateGroup = LateGroup  # type: ignore[attr-defined]
LateGroup.__module__ = LATE_MODULE.__name__


def _open_stream(data: bytes) -> None:
    parsed = parse_stream(data)
    sys.modules[LATE_MODULE.__name__] = LATE_MODULE  # the program has imported it by now
    try:
        for event in parsed.events:  # what replay does when it serves them
            value = parsed.decode(event)
            within_budget(value, len(event.value), _shared(parsed))
    finally:
        del sys.modules[LATE_MODULE.__name__]


def _shared(parsed: ParsedStream) -> set[int]:
    """The stream's own objects a value may refer to: each blob's bytes and its one str."""
    return {id(raw) for raw in parsed.blobs.values()} | {id(t) for t in parsed.texts.values()}


STREAM_SEEDS = 1000


def fuzz_stream() -> None:
    """Seeds 0..STREAM_SEEDS-1, each one stream: three in four changed through its records
    (structured_stream), one in four through its bytes."""
    for seed in range(STREAM_SEEDS):
        rng = random.Random(seed)
        if rng.random() < 3 / 4:
            bad = structured_stream(rng)
        else:
            raw, refs = _valid_stream(random_value(rng), rng.random() < 0.5)
            bad = mutate(rng, raw, refs)
        try:
            opens_or_refuses(lambda: _open_stream(bad))  # noqa: B023 - called at once
        except BaseException as exc:
            exc.add_note(f"stream fuzz seed {seed}")
            raise


def test_stream_fuzz_under_a_memory_cap() -> None:
    run_capped("fuzz_stream")


# --- (c) the segment reader on a local directory store -------------------------------------

_IDENTITY: Identity | None = None
_CHUNK, _SEGMENT = 64, SEGMENT_HEADER.size + 3 * (5 + 64 + 16)


def _identity() -> Identity:
    global _IDENTITY
    if _IDENTITY is None:
        _IDENTITY = generate_identity()
    return _IDENTITY


def _seal(directory: Path, plaintext: bytes) -> None:
    store = LocalDirStore(directory)
    with SealedWriter(
        store, _identity().recipient, "run-fuzz", chunk_size=_CHUNK, segment_size=_SEGMENT
    ) as writer:
        writer.write(plaintext)


@FUZZ
@given(st.data(), st.binary(min_size=0, max_size=600))
def fuzz_segments(data: st.DataObject, plaintext: bytes) -> None:
    directory = Path(tempfile.mkdtemp(prefix="sealtrace-fuzz-"))
    try:
        _seal(directory, plaintext)
        names = sorted(p.name for p in directory.iterdir())
        target = directory / data.draw(st.sampled_from(names))
        os.chmod(target, 0o644)
        raw = target.read_bytes()
        op = data.draw(st.sampled_from(["mutate", "sparse", "chunk-length"]))
        if op == "mutate":
            target.write_bytes(data.draw(mutated(raw, [])))
        elif op == "sparse":
            os.truncate(target, data.draw(st.sampled_from([2**20, 2**30, 3 * 2**30])))
        elif len(raw) >= SEGMENT_HEADER.size + 4:
            huge = data.draw(st.sampled_from([0xFFFFFFFF, 2**24, 2**31]))
            patched = bytearray(raw)
            patched[SEGMENT_HEADER.size : SEGMENT_HEADER.size + 4] = huge.to_bytes(4, "big")
            target.write_bytes(bytes(patched))
        opens_or_refuses(lambda: SealedReader(LocalDirStore(directory), _identity()).read_all())
    finally:
        shutil.rmtree(directory)


def test_segment_reader_fuzz_under_a_memory_cap() -> None:
    run_capped("fuzz_segments")


# --- targeted: the blob-reference bomb and the oversized segment ---------------------------

BOMB_BLOB = b"a" * (4 * 1024 * 1024)  # decodes as a 4 MiB str
BOMB_REFS = 50_000  # 1.6 MB of 33-byte references: 200 GiB if each decoded to a copy


def bomb_stream() -> bytes:
    digest = hashlib.sha256(BOMB_BLOB).digest()
    value = bytes((T_LIST,)) + varint(BOMB_REFS) + _ref(T_BLOB_STR, BOMB_BLOB) * BOMB_REFS
    records = [
        (META, encode_value({"argv": ["app.py"]})),
        (BLOB, digest + BOMB_BLOB),
        (NAME, encode_value("json.loads")),
        (CALL, _call(value)),
    ]
    return build_stream(records)


def open_bomb() -> None:
    parsed = parse_stream(bomb_stream())
    for event in parsed.events:
        value = parsed.decode(event)
        assert len(value) == BOMB_REFS
        assert len({id(item) for item in value}) == 1  # one str, shared by every reference


def test_blob_reference_bomb_stays_under_the_cap() -> None:
    # 1.7 MB of stream; each reference decoding to a copy would ask for 200 GiB.
    assert run_capped("open_bomb") < 256 * 1024 * 1024


def test_a_value_within_the_budget_decodes() -> None:
    # 400 kB of empty lists: 64 x its length + 1 MiB covers them.
    value = decode_value(bytes((T_LIST,)) + varint(200_000) + bytes((T_LIST, 0)) * 200_000)
    assert len(value) == 200_000


def test_a_value_past_the_budget_is_a_codec_error() -> None:
    # 2 MB of empty sets would make 1M set objects (over 200 MB), past 64 x 2 MB + 1 MiB.
    count = 1_000_000
    with pytest.raises(CodecError, match="memory budget"):
        decode_value(bytes((T_LIST,)) + varint(count) + bytes((0x13, 0)) * count)


def make_oversized_segment() -> None:
    directory = Path(tempfile.mkdtemp(prefix="sealtrace-sparse-"))
    try:
        _seal(directory, b"x" * 500)
        segment = directory / "seg-000000"
        os.chmod(segment, 0o644)
        os.truncate(segment, 3 * 2**30)  # sparse: 3 GiB listed, nothing on disk
        with pytest.raises(TamperedError, match="larger than any segment"):
            SealedReader(LocalDirStore(directory), _identity()).read_all()
        # Defence in depth: a store read is capped even when its listing under-reports.
        capped = LocalDirStore(directory).get("seg-000000", limit=1000)
        assert len(capped) == 1001
    finally:
        shutil.rmtree(directory)


def test_oversized_segment_is_refused_before_it_is_read() -> None:
    assert run_capped("make_oversized_segment") < 256 * 1024 * 1024


# --- targeted: crafted recordings that declare huge segments, opened by the CLI -------------

# The address-space cap of `sealtrace open` below: a quarter of what reading a 1 GiB segment
# whole would take, room for the largest segment the format allows (64 MiB) and the CLI.
OPEN_CAP = 256 * 1024 * 1024

_CLI_CHILD = """
import atexit, resource, sys
cap = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
peak_file = sys.argv[2]


def peak():  # this process's own peak (VmHWM; see _CHILD), written as it exits
    status = open("/proc/self/status").read()
    with open(peak_file, "w") as out:
        out.write(str(int(status.split("VmHWM:")[1].split()[0]) * 1024))


atexit.register(peak)
sys.argv = ["sealtrace", *sys.argv[3:]]
from sealtrace.proxy.cli import main
main()
"""


def open_capped(location: Path, identity: Path, work: Path) -> tuple[int, list[str], int]:
    """`sealtrace open LOCATION --identity IDENTITY` under OPEN_CAP: exit code, the lines
    of its stderr and its peak RSS in bytes."""
    peak = work / "peak"
    proc = subprocess.run(
        [sys.executable, "-c", _CLI_CHILD, str(OPEN_CAP), str(peak), "open", str(location),
         "--identity", str(identity)],
        capture_output=True, text=True, timeout=300, cwd=work,
    )  # fmt: skip
    assert proc.stdout == "", "no plaintext from a recording that does not open"
    return proc.returncode, proc.stderr.splitlines(), int(peak.read_text())


def craft(directory: Path, recipient: Recipient, *, chunk_size: int, segment_size: int) -> bytes:
    """A header for these sizes, sealed to `recipient` as anyone holding its public key can
    (no size check: the writer would refuse these); its digest."""
    run_id = "run-crafted"
    header = RecordingHeader(
        run_id=run_id,
        chunk_size=chunk_size,
        segment_size=segment_size,
        created_unix_ms=0,
        wrapped_key=wrap_recording_key(os.urandom(32), recipient, run_id),
    ).encode()
    directory.mkdir()
    (directory / "header").write_bytes(header)
    return header_digest(header)


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as out:
        out.truncate(size)


def _empty_chunks(path: Path, digest: bytes, size: int) -> None:
    """A segment of `size` bytes or less that walks as well-formed: empty chunks (a tag each,
    21 bytes), the last one closing the recording."""
    count = (size - SEGMENT_HEADER.size) // (CHUNK_PREFIX.size + 16)
    empty = CHUNK_PREFIX.pack(16, 0) + bytes(16)
    last = CHUNK_PREFIX.pack(16, FLAG_FINAL | FLAG_SEGMENT_END) + bytes(16)
    with open(path, "wb") as out:
        out.write(SEGMENT_HEADER.pack(SEGMENT_MAGIC, FORMAT_VERSION, 0, 0, digest))
        out.write(empty * (count - 1) + last)


# (what the header declares, what seg-000000 is, what the one line says)
CRAFTED = {
    "1 GiB segments declared, a 1 GiB sparse segment": (
        (MAX_CHUNK_SIZE, 1 << 30), "sparse", "header fields are out of range"),
    "the largest segments allowed, sparse": (
        (MAX_CHUNK_SIZE, MAX_SEGMENT_SIZE), "sparse", "is not a version 1 sealtrace segment"),
    "the largest segments allowed, millions of empty chunks": (
        (MIN_CHUNK_SIZE, MAX_SEGMENT_SIZE), "empty chunks", "chunk 0 in seg-000000 failed"),
}  # fmt: skip


@pytest.mark.parametrize(("sizes", "segment", "says"), CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_huge_segment_is_exit_4_in_bounded_memory(
    tmp_path: Path, sizes: tuple[int, int], segment: str, says: str
) -> None:
    # The recording is sealed to the opener's own key, as a producer holding the run's public
    # key could seal it: the key unwraps, and the segments are what stand between the reader
    # and its memory (docs/format.md, "Memory budget").
    _, key_file = write_keypair(tmp_path / "keys", "opener")
    recording = tmp_path / "rec"
    chunk_size, segment_size = sizes
    digest = craft(recording, Identity.load(key_file).recipient, chunk_size=chunk_size,
                   segment_size=segment_size)  # fmt: skip
    declared = SEGMENT_HEADER.size + (CHUNK_PREFIX.size + chunk_size + TAG_SIZE) * max(
        1, (segment_size - SEGMENT_HEADER.size) // (CHUNK_PREFIX.size + chunk_size + TAG_SIZE)
    )  # what the header lets a segment hold
    if segment == "sparse":
        _sparse(recording / "seg-000000", declared)
    else:
        _empty_chunks(recording / "seg-000000", digest, declared)
    code, lines, peak = open_capped(recording, key_file, tmp_path)
    assert code == 4, lines
    assert len(lines) == 1 and says in lines[0], lines
    # One segment (at most MAX_SEGMENT_SIZE) at a time, and nothing in proportion to its
    # chunk count: the budget docs/format.md states, well inside the cap.
    assert peak < MAX_SEGMENT_SIZE + 96 * 1024 * 1024, peak


# --- targeted: non-codec exceptions from malformed values ----------------------------------


MALFORMED = {
    "ExceptionGroup with empty args (TypeError)": _exc("builtins:ExceptionGroup", encode_value(())),
    "timedelta with no fields (IndexError)": bytes((T_EXTENSION,))
    + encode_value("timedelta")
    + encode_value(()),
    "timedelta out of range (OverflowError)": bytes((T_EXTENSION,))
    + encode_value("timedelta")
    + encode_value((10**20, 0, 0)),
    "stat_result from a dict (KeyError)": bytes((T_EXTENSION,))
    + encode_value("stat_result")
    + encode_value({}),
    "date from an int (TypeError)": bytes((T_EXTENSION,)) + encode_value("date") + encode_value(5),
    "timezone from garbage (ValueError)": bytes((T_EXTENSION,))
    + encode_value("timezone")
    + encode_value((1, 2, 3)),
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_values_are_codec_errors(raw: bytes) -> None:
    with pytest.raises(CodecError) as caught:
        decode_value(raw)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_call_values_are_refused_by_the_parser(raw: bytes) -> None:
    stream = build_stream([(META, encode_value({})), (NAME, encode_value("f")), (CALL, _call(raw))])
    with pytest.raises(CodecError):
        _open_stream(stream)


def test_the_child_cap_is_real() -> None:
    # Negative control for the harness itself: a child that allocates past CAP fails.
    limit = f"resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))"
    code = f"import resource; {limit}; b = bytearray({CAP})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "MemoryError" in proc.stderr
    assert resource.RLIMIT_AS  # the platform has the limit the children rely on
