"""The recorder's per-call path in C (sealtrace.proxy._fastpath) is held to the Python one:
the same constants, the same encodings and digests for any value and key, the same event
stream for any sequence of calls, and the same behaviour when calls raise, nest, come from
another thread or when recording itself breaks."""

from __future__ import annotations

import hashlib
import math
import socket
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealtrace.proxy import _codec, _fastpath, _stream
from sealtrace.proxy._codec import encode_value
from sealtrace.proxy._runtime import (
    _DRAIN_AT,
    _RECENT_LIMIT,
    IMPLEMENTATIONS,
    RecordRuntime,
    args_digest,
    record_runtime,
)
from sealtrace.proxy._stream import META, parse_stream


def test_the_native_path_is_built_and_is_the_default() -> None:
    assert list(IMPLEMENTATIONS) == ["native", "python"]
    assert type(record_runtime(_Out())).__name__ == "NativeRecordRuntime"


def test_sealtrace_recorder_names_the_path_and_refuses_an_unknown_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SEALTRACE_RECORDER", "python")
    assert type(record_runtime(_Out())).__name__ == "PythonRecordRuntime"
    monkeypatch.setenv("SEALTRACE_RECORDER", "cobol")
    with pytest.raises(ValueError, match="no recorder implementation 'cobol'"):
        record_runtime(_Out())


def test_its_constants_are_the_formats() -> None:
    python = {
        "CALL": _stream.CALL,
        "OUTPUT": _stream.OUTPUT,
        "STATUS_RETURNED": _stream.STATUS_RETURNED,
        "STATUS_RAISED": _stream.STATUS_RAISED,
        "BLOB_THRESHOLD": _codec.BLOB_THRESHOLD,
        "ARGS_DIGEST_SIZE": _stream.ARGS_DIGEST_SIZE,
        "DRAIN_AT": _DRAIN_AT,
        "RECENT_LIMIT": _RECENT_LIMIT,
        "RECENT_REPR_MAX": 256,
        "MAX_DEPTH": _codec._MAX_DEPTH,
        "KEY_DEPTH": 3,
    }
    python |= {
        name: getattr(_codec, name)
        for name in ("T_NONE", "T_FALSE", "T_TRUE", "T_INT", "T_FLOAT", "T_STR", "T_BYTES")
    }
    python |= {name: getattr(_codec, name) for name in ("T_TUPLE", "T_LIST", "T_DICT")}
    assert {name: getattr(_fastpath, name) for name in python} == python


def test_its_blake2b_is_rfc_7693s() -> None:
    # hashlib's BLAKE2b is the reference implementation's; every block boundary is crossed.
    data = hashlib.sha512(b"sealtrace").digest() * 8
    for n in range(0, len(data) + 1):
        for size in (1, 16, 32, 64):
            expected = hashlib.blake2b(data[:n], digest_size=size).digest()
            assert _fastpath.blake2b(data[:n], size) == expected, (n, size)
    # Negative control: the digest size is part of the parameter block, not a truncation.
    assert _fastpath.blake2b(b"abc", 16) != hashlib.blake2b(b"abc").digest()[:16]
    with pytest.raises(ValueError, match="digest size"):
        _fastpath.blake2b(b"abc", 65)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(min_size=100, max_size=300),
    st.binary(max_size=200),
    st.sampled_from(["\udcff", "é\ud800x", "x" * 4095, "y" * 4096, b"z" * 4095, b"w" * 4096]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.lists(inner, max_size=6).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), inner, max_size=5),
        st.sets(st.integers(), max_size=3),
    ),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_values)
def test_it_encodes_every_value_as_python_does_or_defers(value: Any) -> None:
    encoded = _fastpath.encode(value)
    if encoded is not None:
        assert encoded == encode_value(value)


@pytest.mark.parametrize(
    "value",
    [2**62, -(2**62) - 1, 10**30, b"w" * 4096, "y" * 4096, {1}, frozenset(), 1 + 2j,
     KeyError("k"), bytearray(b"x"), [[1, {2}]], _codec.UnencodableError("x")],
)  # fmt: skip
def test_it_defers_what_needs_python(value: Any) -> None:
    assert _fastpath.encode(value) is None


def test_it_defers_nesting_past_the_limit_and_encodes_up_to_it() -> None:
    def nested(depth: int) -> list[Any]:
        value: list[Any] = []
        for _ in range(depth):
            value = [value]
        return value

    assert _fastpath.encode(nested(200)) == encode_value(nested(200))
    assert _fastpath.encode(nested(202)) is None


def test_its_float_encoding_keeps_every_bit() -> None:
    payload = float.fromhex("nan")
    for value in (-0.0, 0.0, math.inf, -math.inf, payload, 5e-324, 1.7976931348623157e308):
        assert _fastpath.encode(value) == encode_value(value)
    signalling = __import__("struct").unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf0\x7f")[0]
    assert _fastpath.encode(signalling) == b"\x05\x01\x00\x00\x00\x00\x00\xf0\x7f"


_plain_items = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=30),
    # ASCII with quotes, backslashes and control characters: the pipeline's thread makes
    # the repr of these (plain_repr), and must make exactly repr()'s
    st.text(st.characters(max_codepoint=127), max_size=30),
)
_keys = st.one_of(
    st.none(),
    st.lists(_plain_items, max_size=6).map(tuple),
    st.lists(
        st.one_of(_plain_items, st.lists(_plain_items, max_size=3).map(tuple)), max_size=4
    ).map(tuple),
    st.lists(st.one_of(_plain_items, st.floats(), st.booleans(), st.binary()), max_size=4).map(
        tuple
    ),
    st.integers(),
    st.text(max_size=5),
)


@settings(max_examples=400, deadline=None)
@given(_keys)
def test_it_digests_keys_as_python_does_or_defers(key: Any) -> None:
    digest = _fastpath.digest(key)
    if digest is not None:
        assert digest == args_digest(key)


@pytest.mark.parametrize(
    "key",
    [None, (), (1, "a", None), (1, (2, ("x", None))), (1.5, b"x", True, 1), ((1.0,), -0.0),
     (socket.AF_INET, socket.SOCK_STREAM, 6, None), ("127.0.0.1", 80, 0, socket.SOCK_STREAM),
     ((socket.AF_INET, 1), "x")],
)  # fmt: skip
def test_it_digests_plain_inexact_and_int_enum_keys_itself(key: Any) -> None:
    args_digest(key)  # Python meets the enum classes first, as the recorder does
    digest = _fastpath.digest(key)
    assert digest is not None and digest == args_digest(key)


@pytest.mark.parametrize("special", ["'", '"', "\\", "\n", "\x00", "\x1f", "\x7f", "'\""])
def test_it_finds_what_repr_escapes_anywhere_in_a_str(special: str) -> None:
    """A character that changes a str's repr (a quote, a backslash, a control character)
    counts wherever it is in the str, in the repr C writes for a key it digests itself."""
    for length in (7, 8, 9, 16, 23):
        for at in range(length):
            text = "a" * at + special + "b" * (length - at)
            key = (text, 1)
            assert _fastpath.digest(key) == args_digest(key), (length, at)


@pytest.mark.parametrize(
    "key", [5, "plain", [1], (object(),), (bytearray(b"x"),), ({"k": 1},), (1.5, socket.AF_INET)]
)
def test_it_leaves_other_keys_to_python(key: Any) -> None:
    args_digest(key)
    assert _fastpath.digest(key) is None


def test_equal_plain_and_enum_keys_keep_their_own_digests() -> None:
    # (AF_INET, 1) == (2, 1): a digest cache shared between the two shapes would mix them up.
    plain, enum = args_digest((2, 1)), args_digest((socket.AF_INET, 1))
    assert plain != enum
    for implementation in IMPLEMENTATIONS:
        out = _Out()
        rt = record_runtime(out, implementation=implementation)
        rt.record_value(META, {"run_id": "shapes"})
        for key in [(2, 1), (socket.AF_INET, 1), (2, 1), (socket.AF_INET, 1)]:
            rt.call("k", key, lambda: None)
        rt.finish(0)
        digests = [e.args_digest for e in parse_stream(bytes(out.data)).events]
        assert digests == [plain, enum, plain, enum], implementation


@pytest.mark.parametrize(
    "key",
    [("it's",), ('say "hi"',), ("both ' and \"",), ("back\\slash",), ("tab\t",), ("\x7f",),
     ("é",), ("\udcff",), (2**63 - 1,), (-(2**63),), (-(2**63) - 1,), (2**200,), (-5, 0, None),
     ((),), ((1,),), ("",), ("x" * 256,), ("x" * 257,)],
)  # fmt: skip
def test_its_repr_of_a_key_is_reprs(key: Any) -> None:
    assert _fastpath.digest(key) == args_digest(key)
    assert (
        _fastpath.digest(key)
        == _codec.hashlib.blake2b(
            b"r" + repr(key).encode("utf-8", "surrogatepass"), digest_size=16
        ).digest()
    )


def test_it_defers_keys_nested_deeper_than_python_digests_by_repr() -> None:
    # As _key_shape: tuples in the key to three levels; a fourth is digested by its encoding.
    assert _fastpath.digest(((1, (2, (3,))),)) == args_digest(((1, (2, (3,))),))
    assert _fastpath.digest(((1, (2, (3, (4,)))),)) is None


# -- whole streams --------------------------------------------------------------------------


class _Out:
    """The pipeline's side of RecordRuntime, keeping what it is sent."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.sends = 0

    def send(
        self,
        records: bytearray,
        unhashed: int = 0,
        *,
        flush: bool = False,
        finish: Callable[[bytearray, int], Any] | None = None,
    ) -> None:
        self.data += records if finish is None else finish(records, unhashed)
        self.sends += 1

    def end(self, last: Callable[[bytes], bytes] | None = None) -> None:
        if last is not None:
            self.data += last(_digest(bytes(self.data[len(_stream.stream_prefix()) :])))

    def abort(self) -> None:
        pass


def _digest(body: bytes) -> bytes:
    hasher = _stream.stream_digest()
    hasher.update(body)
    return bytes(hasher.digest())


def _record(implementation: str, calls: list[tuple[str, Any, Any, Any]]) -> bytes:
    out = _Out()
    rt = record_runtime(out, implementation=implementation, report=lambda message: None)
    rt.record_value(META, {"run_id": "same"})
    for kind, name, key, value in calls:
        if kind == "call":
            assert rt.call(name, key, lambda value=value: value) is value
        elif kind == "invoke":
            assert rt.invoke(name, key, _Box(), "echo", value) is value
        elif kind == "raise":
            with pytest.raises(OSError, match=r"^\[Errno 5\] "):
                rt.call(name, key, lambda value=value: _raise(OSError(5, str(value))))
        else:
            assert rt.output(name, key, value, lambda value=value: len(value)) == len(value)
    rt.finish(0)
    assert rt.outcome == "complete"
    return bytes(out.data)


def _raise(exc: BaseException) -> Any:
    raise exc


class _Box:
    def echo(self, value: Any) -> Any:
        return value

    def fail(self, *args: Any) -> Any:
        raise OSError(5, f"failed with {len(args)} arguments")


_calls = st.lists(
    st.tuples(
        st.sampled_from(["call", "call", "invoke", "raise", "output"]),
        st.sampled_from([f"callee.{i}" for i in range(6)]),
        _keys,
        _values,
    ).map(
        lambda c: (
            (c[0], c[1], c[2], c[3])
            if c[0] != "output"
            else (c[0], c[1], c[2], c[3] if isinstance(c[3], bytes) else repr(c[3]).encode())
        )
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_calls)
def test_both_paths_record_the_same_stream_for_any_calls(
    calls: list[tuple[str, Any, Any, Any]],
) -> None:
    native, python = _record("native", calls), _record("python", calls)
    assert native == python
    parsed = parse_stream(native)
    assert parsed.exit is not None and parsed.exit["events"] == len(calls) == len(parsed.events)


def test_a_long_stream_is_handed_over_in_buffers_and_finished_alike() -> None:
    calls = [("call", "socket.recv", (i, 8192, 0), bytes([i % 251]) * 3000) for i in range(100)]
    streams = {}
    for implementation in IMPLEMENTATIONS:
        out = _Out()
        rt = record_runtime(out, implementation=implementation)
        for _, name, key, value in calls:
            rt.call(name, key, lambda value=value: value)
        rt.finish(0)
        assert out.sends >= 100 * 3000 // _DRAIN_AT  # negative control: it did drain
        streams[implementation] = bytes(out.data)
    assert streams["native"] == streams["python"]


def test_callee_names_past_the_cache_and_made_anew_for_each_call_keep_their_heads() -> None:
    # A twin passes the same str on every call; a Python adapter may build its name anew for
    # each. More distinct names than the C path's cache of heads holds (HEAD_CACHE / 2), new
    # objects for equal names, and two hot names in between: every call keeps its callee.
    calls: list[tuple[str, Any, Any, Any]] = []
    for i in range(300):
        calls.append(("call", ("socket.recv", "sqlite3.Cursor.execute")[i % 2], (i,), i))
        calls.append(("call", "".join(["callee.", str(i % 150)]), (i,), None))
    native = _record("native", calls)
    assert native == _record("python", calls)
    assert len(parse_stream(native).events) == 600


def test_pending_digests_are_made_on_the_pipelines_side_only() -> None:
    out = _Out()
    rt = record_runtime(out, implementation="native")
    rt.record_value(META, {"run_id": "pending"})
    rt.call("socket.recv", (7, 8192, 0), lambda: b"x")
    raw = bytes(rt._buf)
    meta_at = len(_stream.stream_prefix())
    name_at = meta_at + 2 + raw[meta_at + 1]
    assert raw[name_at] == _stream.NAME and raw[name_at + 1] < 0x80
    call_at = name_at + 2 + raw[name_at + 1]
    assert raw[call_at] == _stream.CALL | 0x80  # the record waits for its digest
    finished = _fastpath.finalize(bytearray(raw), len(_stream.stream_prefix()))
    assert finished != raw and _fastpath.finalize(finished, 10) is finished  # none pending
    assert parse_stream(bytes(finished)).events[0].args_digest == args_digest((7, 8192, 0))
    with pytest.raises(ValueError, match="whole records"):
        _fastpath.finalize(bytearray(raw[:-1]), len(_stream.stream_prefix()))


_ASCII = "".join(map(chr, range(128)))
_PENDING_KEYS = [
    (1,), (0, -1, None), (2**30, -(2**45), 2**60 - 1), (2**62 - 1, -(2**62)), (2**62,),
    ("",), ("a",), (("nested", (1,)), ()),
    *((_ASCII[i : i + 16],) for i in range(0, 128, 16)),  # every ASCII character
    ("it's",), ('say "hi"',), ("both ' and \"",), ("back\\slash",), ("\t\n\r\x00\x7f",),
    (7, "x" * 300), ((1, 2), ((3,),)), (socket.AF_INET, "host", 80), (socket.SOCK_STREAM,),
    # a lock's acquire: (its id, bool(blocking), timeout); bools beside an int enum too
    (5, True, -1), (False,), ((True, None), False), (socket.AF_INET, True),
]  # fmt: skip


def test_pending_keys_get_the_digest_that_python_makes() -> None:
    """A plain key's record carries its encoding and the pipeline's thread makes its repr
    (plain_repr in fastpath/material.c), and an enum key's its fingerprint encoding: each must come
    to the digest that args_digest makes of the key."""
    expected = [args_digest(key) for key in _PENDING_KEYS]  # Python meets the enum classes
    out = _Out()
    rt = record_runtime(out, implementation="native")
    rt.record_value(META, {"run_id": "pending"})
    for key in _PENDING_KEYS:
        rt.call("clock.read", key, lambda: 1)
    raw = bytes(rt._buf)
    finished = _fastpath.finalize(bytearray(raw), len(_stream.stream_prefix()))
    assert [e.args_digest for e in parse_stream(bytes(finished)).events] == expected
    # all pending but the key with an int past 62 bits (a T_BIGINT: digested here)
    assert raw.count(bytes([_stream.CALL | 0x80])) >= len(_PENDING_KEYS) - 1


# -- behaviour ------------------------------------------------------------------------------


@pytest.fixture(params=list(IMPLEMENTATIONS))
def runtime(request: pytest.FixtureRequest) -> tuple[RecordRuntime, _Out, list[str]]:
    out, reports = _Out(), []
    rt = record_runtime(out, implementation=request.param, report=reports.append)
    rt.record_value(META, {"run_id": "behaviour"})
    return rt, out, reports


def test_a_raised_exception_is_recorded_and_reaches_the_caller_unchanged(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, out, _ = runtime
    error = ConnectionRefusedError(111, "refused")

    def refuse() -> None:
        raise error

    with pytest.raises(ConnectionRefusedError) as caught:
        rt.call("socket.connect", (1, ("h", 80)), refuse)
    assert caught.value is error
    assert any(frame.name == "refuse" for frame in traceback.extract_tb(caught.value.__traceback__))
    rt.finish(0)
    (event,) = parse_stream(bytes(out.data)).events
    assert event.callee == "socket.connect" and event.raised


def test_keyboard_interrupt_in_the_call_goes_through(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, _, reports = runtime
    with pytest.raises(KeyboardInterrupt):
        rt.call("time.sleep", (1.0,), lambda: _raise(KeyboardInterrupt()))
    assert rt.active and not reports
    assert rt.call("time.time", None, lambda: 2.5) == 2.5
    assert rt.events == 2


def test_calls_inside_a_call_and_from_other_threads_pass_through(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, out, _ = runtime
    assert rt.call("outer", (1,), lambda: rt.call("inner", (2,), lambda: 3)) == 3
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(rt.call("other", (), lambda: 4)))
    thread.start()
    thread.join()
    assert results == [4]
    assert rt.output("out", (1,), b"data", lambda: 4) == 4
    rt.finish(0)
    assert [e.callee for e in parse_stream(bytes(out.data)).events] == ["outer", "out"]


def test_a_broken_record_path_ends_the_recording_once_and_lets_results_through(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, _, reports = runtime
    rt._buf = "not a buffer"  # type: ignore[assignment]
    assert rt.call("time.time", None, lambda: 1.5) == 1.5
    assert not rt.active and rt.outcome is not None and rt.outcome.startswith("failed")
    assert rt.call("time.time", None, lambda: 2.5) == 2.5  # straight through from now on
    assert rt.output("socket.send", (1, 0), b"x", lambda: 1) == 1
    assert len(reports) == 1 and "recording failed" in reports[0]


def test_an_unencodable_result_stops_the_recording_cleanly(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, out, reports = runtime
    thing = object()
    assert rt.call("time.time", None, lambda: 1.5) == 1.5
    assert rt.call("weird", (), lambda: thing) is thing
    assert not rt.active and rt.outcome is not None and rt.outcome.startswith("stopped")
    assert len(reports) == 1 and "cannot be recorded" in reports[0]
    parsed = parse_stream(bytes(out.data))
    assert [e.callee for e in parsed.events] == ["time.time"] and parsed.stop is not None


def test_a_recording_that_ends_inside_a_call_records_nothing_more(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, out, _ = runtime

    def start_thread() -> int:
        rt.unsupported("threading.Thread.start")
        return 7

    assert rt.call("thread.start", (), start_thread) == 7
    assert rt.call("time.time", None, lambda: 1.0) == 1.0
    parsed = parse_stream(bytes(out.data))
    assert parsed.events == [] and parsed.stop is not None


def test_invoke_calls_the_method_with_its_arguments_and_records_like_call(
    runtime: tuple[RecordRuntime, _Out, list[str]],
) -> None:
    rt, out, _ = runtime
    assert rt.invoke("box.echo", (1,), _Box(), "echo", b"abc") == b"abc"
    with pytest.raises(OSError, match="failed with 8 arguments"):
        rt.invoke("box.fail", (2,), _Box(), "fail", *range(8))
    with pytest.raises(OSError, match="failed with 12 arguments"):
        rt.invoke("box.fail", (3,), _Box(), "fail", *range(12))
    with pytest.raises(AttributeError):
        rt.invoke("box.nothing", (4,), _Box(), "nothing")
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(rt.invoke("t", (), _Box(), "echo", 5)))
    thread.start()
    thread.join()
    assert results == [5]
    rt.finish(0)
    events = parse_stream(bytes(out.data)).events
    assert [(e.callee, e.raised) for e in events] == [
        ("box.echo", False), ("box.fail", True), ("box.fail", True), ("box.nothing", True)
    ]  # fmt: skip
