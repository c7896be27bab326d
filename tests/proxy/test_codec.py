"""The value codec is exact for what it carries, refuses what it cannot carry, and never
executes anything named by the data it decodes."""

from __future__ import annotations

import datetime as dt
import math
import os
import sqlite3
import struct
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sealtrace.proxy._codec import (
    BLOB_THRESHOLD,
    CodecError,
    RecordedException,
    UnencodableError,
    blob_digest,
    decode_value,
    encode_value,
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**300), max_value=2**300)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
    | st.binary()
    | st.complex_numbers(allow_nan=False)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
        | st.frozensets(st.integers() | st.text(max_size=4), max_size=4)
    ),
    max_leaves=20,
)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, complex):
        return _same(a.real, b.real) and _same(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(values)
def test_round_trip_is_exact(value: Any) -> None:
    assert _same(decode_value(encode_value(value)), value)


@pytest.mark.parametrize(
    "bits", [0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8DEADBEEF0000, 0x8000000000000000]
)
def test_float_bits_survive(bits: int) -> None:
    value = struct.unpack("<d", struct.pack("<Q", bits))[0]
    out = decode_value(encode_value(value))
    assert struct.unpack("<Q", struct.pack("<d", out))[0] == bits
    assert math.isnan(out) or out == value


def test_lone_surrogates_and_big_ints() -> None:
    for value in ("\udcff\udc80", os.fsdecode(b"\xff\xfe"), 10**400, -(10**400)):
        assert decode_value(encode_value(value)) == value


def test_extension_types() -> None:
    samples = [
        dt.datetime(2024, 3, 31, 1, 30, 5, 123, tzinfo=dt.timezone(dt.timedelta(hours=2), "X")),
        dt.datetime(2021, 11, 7, 1, 30, fold=1),
        dt.datetime.now(dt.UTC),
        dt.date(1999, 12, 31),
        dt.time(23, 59, 59, 999999),
        dt.timedelta(days=-3, seconds=5, microseconds=7),
        uuid.uuid4(),
        os.stat(__file__),
        time.localtime(),
        os.times(),
        os.uname(),
    ]
    for sample in samples:
        out = decode_value(encode_value(sample))
        assert type(out) is type(sample) and out == sample
        if isinstance(sample, dt.datetime):
            assert out.fold == sample.fold and out.tzinfo == sample.tzinfo
    stat = decode_value(encode_value(os.stat(__file__)))
    assert stat.st_mtime_ns == os.stat(__file__).st_mtime_ns


def test_exceptions_keep_type_args_and_details() -> None:
    err = FileNotFoundError(2, "No such file or directory", "/nope")
    out = decode_value(encode_value(err))
    assert type(out) is FileNotFoundError
    assert (out.errno, out.strerror, out.filename) == (2, "No such file or directory", "/nope")
    conn = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError) as caught:
        conn.execute("select * from missing")
    conn.close()
    back = decode_value(encode_value(caught.value))
    assert type(back) is sqlite3.OperationalError and back.args == caught.value.args
    assert type(decode_value(encode_value(TimeoutError("timed out")))) is TimeoutError
    assert type(decode_value(encode_value(KeyError("k")))) is KeyError


def test_unknown_exception_class_is_not_imported() -> None:
    # The data names a module that is not loaded: decoding must not import it.
    probe = """
import sys
from sealtrace.proxy._codec import decode_value, encode_value
class Fake(Exception):
    pass
Fake.__module__ = "antigravity"
data = encode_value(Fake("x"))
out = decode_value(data)
print(type(out).__name__, "antigravity" in sys.modules, out.args)
"""
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "RecordedException False ('antigravity:Fake', 'x')"
    assert RecordedException.__name__ == "RecordedException"


def test_unencodable_values_are_refused() -> None:
    for value in (object(), [1, object()], {1: sqlite3}, open):
        with pytest.raises(UnencodableError):
            encode_value(value)


def test_large_payloads_are_content_addressed_once() -> None:
    big = b"x" * BLOB_THRESHOLD
    blobs: dict[bytes, bytes] = {}
    calls: list[bytes] = []

    def store(digest: bytes, data: bytes) -> None:
        calls.append(digest)
        blobs[digest] = data

    encoded = encode_value([big, big, big.decode()], store)
    assert len(encoded) < 3 * 40 and len(set(calls)) == 1 and calls[0] == blob_digest(big)
    assert decode_value(encoded, blobs) == [big, big, big.decode()]
    with pytest.raises(CodecError, match="missing blob"):
        decode_value(encoded, {})


@pytest.mark.parametrize(
    "data",
    [b"", b"\x07\x05ab", b"\x10\xff\xff\xff\xff\x0f", b"\x63", b"\x21\x07\x03bad\x00", b"\x03"],
)
def test_malformed_input_is_a_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        decode_value(data)


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(CodecError, match="trailing"):
        decode_value(encode_value(1) + b"\x00")


def test_no_pickle_anywhere_in_the_recorder() -> None:
    import sealtrace.proxy as proxy

    root = os.path.dirname(proxy.__file__)
    for name in os.listdir(root):
        if name.endswith(".py"):
            with open(os.path.join(root, name)) as f:
                text = f.read()
            assert "import pickle" not in text and "marshal" not in text, name
