"""Opening any recording runs in bounded memory and ends in success or an IntegrityError.

The property (docs/format.md, "Memory budget"): whatever bytes a recording holds, decoding a
value, parsing an event stream (and serving its events) and reading segments from a store
either succeed or raise a sealtrace IntegrityError (CodecError, TamperedError, ...), exit 4.
Never another exception, and never by running out of memory: every fuzz loop runs in a child
process whose address space is capped at CAP, and an IntegrityError that was caused by a
MemoryError counts as a failure.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sealtrace.proxy import LocalDirStore, SealedReader, SealedWriter
from sealtrace.proxy._codec import (
    T_BLOB_BYTES,
    T_BLOB_STR,
    T_EXCEPTION,
    T_EXTENSION,
    T_LIST,
    T_STR,
    T_TUPLE,
    CodecError,
    decode_value,
    encode_value,
    varint,
)
from sealtrace.proxy._errors import IntegrityError, TamperedError
from sealtrace.proxy._format import SEGMENT_HEADER
from sealtrace.proxy._keys import Identity, generate_identity
from sealtrace.proxy._stream import BLOB, CALL, EXIT, META, NAME, OUTPUT, parse_stream
from sealtrace.proxy._stream import stream_prefix as _prefix

CAP = 512 * 1024 * 1024  # the address-space cap of every child below (docs/format.md)
EXAMPLES = 250
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
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


@st.composite
def mutated(draw: st.DrawFn, raw: bytes, refs: list[bytes]) -> bytes:
    """raw with one to three mutations: bit flips, cuts, insertions, duplicated blob
    references and huge declared lengths."""
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["flip", "cut", "insert", "refs", "length", "nest", "typed"]))
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "refs" and refs:
            count = draw(st.sampled_from([1, 2, 100, 20_000]))
            ref = draw(st.sampled_from(refs))
            tag = draw(st.sampled_from([T_LIST, T_TUPLE]))
            data[pos:pos] = bytes((tag,)) + varint(count) + ref * count
        elif op == "length":
            tag = draw(st.sampled_from([T_STR, T_LIST, T_TUPLE, 4, 8, 9]))
            data[pos:pos] = bytes((tag,)) + varint(draw(st.sampled_from([HUGE, 2**31, 2**20])))
        elif op == "nest":
            data[pos:pos] = bytes((T_LIST, 1)) * draw(st.integers(1, 400))
        elif op == "typed":  # a registered type or a loaded exception class, wrong fields
            args = encode_value(draw(st.lists(scalars, max_size=3).map(tuple)))
            if draw(st.booleans()):
                name = draw(st.sampled_from(EXTENSIONS))
                data[pos:pos] = bytes((T_EXTENSION,)) + encode_value(name) + args
            else:
                name = draw(st.sampled_from(EXCEPTIONS))
                data[pos:pos] = _exc(name, args)
    return bytes(data)


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
    opens_or_refuses(lambda: decode_value(bad, blobs))


def test_codec_fuzz_under_a_memory_cap() -> None:
    run_capped("fuzz_codec")


# --- (b) the event stream parser -----------------------------------------------------------


def _valid_stream(value: Any, with_exit: bool) -> tuple[bytes, list[bytes]]:
    blobs, value_raw = _blobs_and_encoding(value)
    data_blobs, data_raw = _blobs_and_encoding(b"written" * 3)
    records = [(META, encode_value({"argv": ["app.py"], "cwd": "/"}))]
    records += [(BLOB, digest + payload) for digest, payload in blobs.items()]
    records += [(NAME, encode_value("time.time")), (CALL, _call(value_raw))]
    records += [(OUTPUT, _output(b"written", encode_value(7))), (CALL, _call(encode_value(1.5)))]
    del data_blobs, data_raw
    return build_stream(records, with_exit=with_exit), _refs(blobs)


def _open_stream(data: bytes) -> None:
    parsed = parse_stream(data)
    for event in parsed.events:  # what replay does when it serves them
        parsed.decode(event)


@FUZZ
@given(st.data(), values, st.booleans())
def fuzz_stream(data: st.DataObject, value: Any, with_exit: bool) -> None:
    raw, refs = _valid_stream(value, with_exit)
    bad = data.draw(mutated(raw, refs))
    opens_or_refuses(lambda: _open_stream(bad))


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
