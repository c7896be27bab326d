"""What the recorder writes is pinned byte for byte: value encodings, argument digests and a
whole event stream. The expected bytes were made by the recorder as it was before its record
path was optimised (in-line encodings, digest caches, the pipeline thread); any change to them
is a change of the recording format, which needs a new STREAM_VERSION or CODEC_VERSION."""

from __future__ import annotations

import contextlib
import enum
import hashlib
import socket
from collections.abc import Callable
from typing import Any

import pytest

from sealtrace.proxy._boundary import call_wrapper
from sealtrace.proxy._codec import encode_value
from sealtrace.proxy._runtime import IMPLEMENTATIONS, RecordRuntime, args_digest, record_runtime
from sealtrace.proxy._stream import MAGIC, META, STREAM_VERSION, parse_stream


class Color(enum.IntEnum):
    RED = 1


class Thing:
    pass


VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 63, 64, -64, -65, 127, 128, 2**62 - 1, -(2**62), 2**62,
    -(2**62) - 1, 10**30, -(10**30), 0.0, -0.0, 1.5, float("inf"), float("-inf"), float("nan"),
    1 + 2j, "", "a", "é\udcff", "x" * 127, "x" * 128, "y" * 5000, b"", b"\x00\xff", b"z" * 127,
    b"z" * 128, b"w" * 4096, bytearray(b"ab"), memoryview(b"cd"), (), (1,), (1, "a", None),
    [1, [2, (3,)]], {"a": 1, 2: [None]}, {3, 1, 2}, frozenset({"q"}), tuple(range(200)),
    dict.fromkeys(range(130)), ((("size", None, None, None, None, None, None),), -1, 7),
    [(2, 1, 6, "", ("127.0.0.1", 80))], FileNotFoundError(2, "No such file", "/x"),
    KeyError("k"), ValueError("v", 3),
]  # fmt: skip

KEYS: list[Any] = [
    None, (), (16,), (1, 8192, 0), (1, 0), (2, "SELECT v FROM t WHERE k = ?", (17,)),
    (3, ("127.0.0.1", 80)), (1, 1.0, True, "1", b"1", None), (1,), (1.0,), (True,), (0.0,),
    (-0.0,), ((1, (2, (3, (4,)))),), ((1, (2, (3, (4, (5,))))),), ((("a",), {"b": 1}),),
    (Color.RED, 2), (socket.AF_INET, socket.SOCK_STREAM, 6, None), ([1, 2],), (Thing(),),
    (bytearray(b"x"),), ("x" * 300,), ({"k": [1]},), 5, "plain", (1.5, -0.0), (b"a", "a"),
    (socket.SOCK_STREAM,), (1, Color.RED), (Color.RED, 1), (Color.RED, 1.0), (Color.RED, b"x"),
    (Color.RED, (1, Color.RED)), ("127.0.0.1", 80, 0, socket.SOCK_STREAM, 0, 0),
]  # fmt: skip


def _steps() -> list[Callable[[RecordRuntime], Any]]:
    def raising(rt: RecordRuntime) -> None:
        def refuse() -> None:
            raise ConnectionRefusedError(111, "Connection refused")

        with contextlib.suppress(ConnectionRefusedError):
            rt.call("socket.connect", (1, ("127.0.0.1", 80)), refuse)

    description = ((("a", None, None, None, None, None, None),), -1, 7)
    steps: list[Callable[[RecordRuntime], Any]] = [
        lambda rt: rt.call("time.time", None, lambda: 1700000000.25),
        lambda rt: rt.call("os.urandom", (16,), lambda: bytes(range(16))),
        lambda rt: rt.call("socket.recv", (1, 8192, 0), lambda: b"x" * 3000),
        lambda rt: rt.call("socket.recv", (1, 8192, 0), lambda: b"y" * 5000),
        lambda rt: rt.call("socket.recv", (1, 8192, 0), lambda: b"y" * 5000),
        lambda rt: rt.output("socket.send", (1, 0), b"hello", lambda: 5),
        lambda rt: rt.output("socket.sendall", (1, 0), memoryview(b"m" * 200), lambda: None),
        lambda rt: rt.output("file.write", (4,), b"q" * 6000, lambda: 6000),
        lambda rt: rt.call("sqlite3.Cursor.execute", (2, "SELECT ?", (1,)), lambda: description),
        lambda rt: rt.call("sqlite3.Cursor.fetchone", (2,), lambda: ("v", 1.5, None, True, 2**70)),
        raising,
        lambda rt: call_wrapper(rt, "os.stat", lambda *a, **k: (a, k))("/p", follow_symlinks=False),
        lambda rt: call_wrapper(rt, "os.getpid", lambda: 4242)(),
        lambda rt: rt.call("thing", (Color.RED, [1], Thing()), lambda: [(2, 1, 6, "", ("h", 80))]),
        lambda rt: rt.call("dict", ("k",), lambda: {"a": [1, 2], "b": {"c": None}}),
        lambda rt: rt.call("floats", (), lambda: (-0.0, float("nan"), float("inf"))),
        lambda rt: rt.call("text", ("\udcff",), lambda: "é" * 100 + "\udcff"),
        lambda rt: rt.note("ctypes", "libc:time is called behind the boundary"),
        lambda rt: rt.call("bigint", (), lambda: -(10**40)),
        lambda rt: rt.call("bytearray", (), lambda: bytearray(b"ba")),
        lambda rt: rt.call("exc-value", (), lambda: KeyError("k")),
        lambda rt: rt.call("nested-call", (1,), lambda: rt.call("inner", (2,), lambda: 3)),
        lambda rt: rt.call("socket.recv", (1, 127, 0), lambda: b"s" * 127),
        lambda rt: rt.call("socket.recv", (1, 128, 0), lambda: b"t" * 128),
        lambda rt: rt.output("socket.send", (1, 0), b"u" * 127, lambda: 127),
        lambda rt: rt.call("os.getrandom", (5000,), lambda: b"v" * 4095),
    ]
    # More callees than one byte of varint numbers, with results of every inline kind.
    for i in range(140):
        result = (None, b"w" * (i % 128), i % 64 - 32, i / 7, i * 1000)[i % 5]
        steps.append(lambda rt, i=i, result=result: rt.call(f"callee.{i}", (i,), lambda: result))
    for i in range(300):  # more than 64 KiB, so the stream is handed over in several parts
        steps.append(lambda rt, i=i: rt.call("time.monotonic", None, lambda: i * 0.5))
        steps.append(
            lambda rt, i=i: rt.call(
                "socket.recv_into", (9, 65536, 0), lambda: bytes([i % 256]) * i * 7
            )
        )
    return steps


def _encoding(value: Any) -> str:
    data = encode_value(value)
    return data.hex() if len(data) <= 64 else hashlib.sha256(data).hexdigest()


EXPECTED_ENCODINGS = [
    "00", "02", "01", "0300", "0302", "0301", "037e", "038001", "037f", "038101", "03fe01",
    "038002", "03feffffffffffffff7f", "03ffffffffffffffff7f", "04080000000000000040",
    "0408ffffffffffffffbf", "040d00000040eaed7446d09c2c9f0c", "040d000000c015128bb92f63d360f3",
    "050000000000000000", "050000000000000080", "05000000000000f83f", "05000000000000f07f",
    "05000000000000f0ff", "05000000000000f87f", "06000000000000f03f0000000000000040", "0700",
    "070161", "0705c3a9edb3bf", "ac2c6ec60b41d5cba9fdbe0dc759a5bb0fcc1ce75c83e2dfa8309fd03bf077aa",
    "922e652491099736d6cd8933fead322056661103569e20e05e35c7c07bd76156",
    "7da63b3431a706e486c5cd4b6222033182a124e3fa763cecc4e3c9f2511371a2", "0800", "080200ff",
    "65110ab816e1ac8f79977c85793065fa69574757030346deee924a1d30d83f6e",
    "5d6981468f6f7fb3b8d98ec0d0f50b72d83fa5f57f082f5b2554948693eab9c1",
    "4d9bc2764e95f8df83cf38f0400855132c66ed1f8f93b197ed8f2c0a15c21462", "09026162", "08026364",
    "1000", "10010302", "1003030207016100", "110203021102030410010306", "120207016103020304110100",
    "1303030203040306", "1401070171",
    "565866d37015c2146162bb6cbb999d5f3c0643f26ab90369b516668e1e0dd234",
    "184d412accca85c42dec1d02b6d7f9e20de7e3bd60a7225ad6f815430e5630b1",
    "100310011007070473697a650000000000000301030e",
    "1101100503040302030c0700100207093132372e302e302e3103a001",
    "20071a6275696c74696e733a46696c654e6f74466f756e644572726f7210050304070c4e6f20737563682066696c6507022f7800001200",
    "2007116275696c74696e733a4b65794572726f72100107016b1200",
    "2007136275696c74696e733a56616c75654572726f72100207017603061200",
]  # fmt: skip
EXPECTED_KEY_DIGESTS = [
    "cae66941d9efbd404e4d88758ea67670", "cae66941d9efbd404e4d88758ea67670",
    "197310df18fd20cb454fd276b2d147f0", "77a2963730aca77289bfcaecd2d9b4fa",
    "6209ae284a53776af94aa554f2fd5792", "a4a3027c6cea0ed87ed2993fe92d6674",
    "921a93b7ee9a387cbf138feed3d24afe", "f37d44514fa44580effacc6386df358f",
    "03772e1eb7d3305472f19198b133bd73", "766880461cb2fa16b490159d948a435e",
    "70ac57c1cedb367cdf6866a34aa998ec", "fbbe5aa2bb7c99730f848eaeaf968c66",
    "5d501d5abbfa619442bd1a3a2948d9b7", "ffab3dcf18e5cbab7e6c3b7d89a6284f",
    "05500eff906724afb84105c7c176c869", "dc28a39a57b0a596ac7d78489daadd6e",
    "b976550ddce8a121c600539954e6cecb", "1de2ccafca3754f1eeacffb6a786e491",
    "e34e39a2bc6a00d577640aef59187ee5", "5ef20d7a134891767ebb8faa7eee926c",
    "5ab623e995a0eab01611f1f6b2d3844d", "5b7c024fbe4a9dc47b06ea31e0d6a94a",
    "f0eacae7e4d988ca15adf9113cd39ba1", "4432992cf609e9184103959f0e97699d",
    "72b3954a8de140aa84d194a57dbfef6d", "00f2a063ac175e27ddd69402aac6959e",
    "bf5c4f2a1c6455e2a9e46297adbfb108", "c57b31d1b72b2f0e16f29cafa4f952ca",
    "f7a535aaa02ddf90a98536b89eb51ef2", "f7a535aaa02ddf90a98536b89eb51ef2",
    "e2d5feb5c343c16475bdd32508d2c261", "374884ff2ef3da8ff168703a1ac2ebbf",
    "26be62b475765ea90831592c2efce7ea", "ddc1f99990baca9fdd5cdb3a84128ff0",
]  # fmt: skip
# Stream version 1's bytes: a one-thread stream of version 2 is the same but for the version
# in its prefix (it has no THREAD record), which the test checks too.
EXPECTED_STREAM = (
    "99a4e7f07ee879753ac58ba9e1e1d53645383b060cd7dcd282dd03753a368c7a",
    357651,
)
VERSION_AT = slice(len(MAGIC), len(MAGIC) + 2)


def test_value_encodings_are_unchanged() -> None:
    assert [_encoding(v) for v in VALUES] == EXPECTED_ENCODINGS


def test_argument_digests_are_unchanged() -> None:
    # Twice: the second round answers from the digest caches.
    for _ in range(2):
        assert [args_digest(key).hex() for key in KEYS] == EXPECTED_KEY_DIGESTS


class _Writer:
    """A SealedWriter stand-in that keeps the plaintext."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: Any) -> None:
        self.data += data

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_an_event_stream_is_unchanged(implementation: str) -> None:
    from sealtrace.proxy._pipeline import StreamPipeline
    from sealtrace.proxy._store import MemoryStore

    writer = _Writer()
    pipeline = StreamPipeline(MemoryStore())
    pipeline.attach(writer)
    rt = record_runtime(pipeline, implementation=implementation)
    rt.record_value(META, {"run_id": "golden", "n": 1})
    for step in _steps():
        step(rt)
    rt.finish(0)
    assert pipeline.close(10) is None
    stream = bytearray(writer.data)
    assert (
        stream[VERSION_AT] == STREAM_VERSION.to_bytes(2, "little") == b"\x05\x00"
    )  # 3: REQUEST records, 4: FORK and FORKED, 5: ROTATED and CONTINUES (none here)
    stream[VERSION_AT] = (1).to_bytes(2, "little")
    assert (hashlib.sha256(stream).hexdigest(), len(stream)) == EXPECTED_STREAM
    parsed = parse_stream(stream)
    assert parsed.exit is not None and parsed.exit["events"] == len(parsed.events) == 765
