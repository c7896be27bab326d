"""The request index's reading of a connection (proxy/_requests.py) and its records in the
event stream: what counts as a request, its status, where it begins and ends, and that a
REQUEST record the stream does not vouch for is refused."""

from __future__ import annotations

from typing import Any

import pytest

from sealtrace.proxy._codec import CodecError, Encoder, _write_varint
from sealtrace.proxy._requests import MAX_LINE, RequestIndex
from sealtrace.proxy._stream import (
    CALL,
    EXIT,
    META,
    NAME,
    REQUEST,
    parse_stream,
    stream_digest,
    stream_prefix,
)


class Recorder:
    """What the index needs of a RecordRuntime: an event count, a thread, a record sink."""

    def __init__(self) -> None:
        self.events = 0
        self.records: list[dict[str, Any]] = []

    def record_request(self, fields: dict[str, Any]) -> None:
        self.records.append(fields)

    def thread_index(self) -> int:
        return 3


def served(*steps: tuple[str, bytes]) -> list[dict[str, Any]]:
    """Play reads ("r"), sends ("s") and a close ("c") on one connection, each one event."""
    recorder = Recorder()
    index = RequestIndex(recorder)
    exchange = index.exchange()
    for what, data in steps:
        before = recorder.events
        recorder.events += 1
        if what == "r":
            exchange.received(data, before)
        elif what == "s":
            exchange.sent(data, recorder.events)
        else:
            exchange.closed()
    index.close()
    return recorder.records


def test_a_request_line_begins_a_request_and_the_status_line_answers_it() -> None:
    (r,) = served(
        ("r", b"POST /orders/7?token=abc HTTP/1.1\r\nHost: x\r\n\r\n{}"),
        ("s", b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n"),
        ("s", b"{}"),
        ("c", b""),
    )
    assert (r["method"], r["path"], r["status"], r["first"], r["last"]) == (
        "POST", "/orders/7", 201, 0, 2,
    )  # fmt: skip
    assert r["complete"] is True and r["thread"] == 3 and r["duration"] >= 0


def test_a_request_line_split_across_reads_is_one_request() -> None:
    (r,) = served(
        ("r", b"GE"), ("r", b"T /a HT"), ("r", b"TP/1.0\r\n\r\n"), ("s", b"HTTP/1.0 200 OK\r\n")
    )
    assert (r["method"], r["path"], r["status"], r["first"]) == ("GET", "/a", 200, 0)


def test_an_interim_response_is_not_the_status() -> None:
    (r,) = served(
        ("r", b"PUT /big HTTP/1.1\r\nExpect: 100-continue\r\n\r\n"),
        ("s", b"HTTP/1.1 100 Continue\r\n\r\n"),
        ("r", b"body"),
        ("s", b"HTTP/1.1 204 No Content\r\n\r\n"),
    )
    assert r["status"] == 204 and r["last"] == 3
    (same_send,) = served(
        ("r", b"PUT /big HTTP/1.1\r\n\r\n"),
        ("s", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 413 Too Large\r\n\r\n"),
    )
    assert same_send["status"] == 413


def test_a_kept_alive_connection_holds_one_request_after_another() -> None:
    first, second = served(
        ("r", b"GET /one HTTP/1.1\r\n\r\n"),
        ("s", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1"),
        ("r", b"GET /two HTTP/1.1\r\n\r\n"),
        ("s", b"HTTP/1.1 404 Not Found\r\n\r\n"),
    )
    assert (first["path"], first["status"], first["first"], first["last"]) == ("/one", 200, 0, 1)
    assert (second["path"], second["status"], second["first"]) == ("/two", 404, 2)


def test_what_is_not_http_1_is_not_indexed() -> None:
    assert served(("r", b"\x16\x03\x01\x02\x00"), ("r", b"GET / HTTP/1.1\r\n")) == []  # TLS
    assert served(("r", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")) == []
    assert served(("r", b"hello\n"), ("s", b"HTTP/1.1 200 OK\r\n")) == []
    assert served(("r", b"G" * (MAX_LINE + 1))) == []  # no line end within the limit
    assert served(("s", b"HTTP/1.1 200 OK\r\n")) == []  # a send before any request


def test_a_request_still_open_at_the_end_is_written_incomplete() -> None:
    (r,) = served(("r", b"GET /slow HTTP/1.1\r\n\r\n"))
    assert r["status"] is None and r["complete"] is False
    (answered,) = served(("r", b"GET /kept HTTP/1.1\r\n\r\n"), ("s", b"HTTP/1.1 200 OK\r\n"))
    assert answered["complete"] is True  # its response had begun


def test_the_index_never_raises_into_the_program() -> None:
    recorder = Recorder()
    exchange = RequestIndex(recorder).exchange()
    exchange.received(object(), 0)  # not bytes: the connection is no longer read
    exchange.sent(object(), 1)
    exchange.received(b"GET / HTTP/1.1\r\n", 2)
    exchange.closed()
    assert recorder.records == []


def test_an_absolute_target_keeps_its_path() -> None:
    (r,) = served(("r", b"GET http://shop.example/a/b?q=1 HTTP/1.1\r\n"), ("s", b"HTTP/1.1 200 x"))
    assert r["path"] == "/a/b"


# -- REQUEST records in the stream ---------------------------------------------------------


def _record(kind: int, value: Any) -> bytes:
    body = bytearray()
    Encoder().encode(body, value)
    out = bytearray((kind,))
    _write_varint(out, len(body))
    return bytes(out + body)


def _stream(requests: list[dict[str, Any]], events: int = 2) -> bytes:
    records = _record(META, {"argv": []}) + _record(NAME, "time.time")
    for _ in range(events):
        body = bytearray(b"\x00" + b"\x00" * 16 + b"\x00")
        Encoder().encode(body, 1.0)
        records += bytes((CALL,)) + bytes((len(body),)) + bytes(body)
    for fields in requests:
        records += _record(REQUEST, fields)
    digest = stream_digest()
    digest.update(records)
    summary = {"status": 0, "exception": None, "events": events, "digest": digest.digest()}
    exit_ = _record(EXIT, summary)
    return stream_prefix() + records + exit_


GOOD = {
    "method": "GET",
    "path": "/",
    "status": 200,
    "first": 0,
    "last": 1,
    "started": 1.0,
    "duration": 0.5,
    "thread": 0,
    "complete": True,
}


def test_request_records_parse_in_the_order_they_began() -> None:
    later = {**GOOD, "first": 1, "path": "/later"}
    parsed = parse_stream(_stream([later, GOOD]))
    assert parsed.indexes_requests
    assert [r.path for r in parsed.requests] == ["/later", "/"]  # as they ended
    assert [r.path for r in parsed.request_index()] == ["/", "/later"]  # as they began


@pytest.mark.parametrize(
    "change",
    [
        {"last": 2},  # an event not recorded before it
        {"first": 2, "last": 1},
        {"first": -1},
        {"status": "200"},
        {"complete": 1},
        {"first": True},
        {"duration": -1.0},
        {"path": "/" * 3000},
        {"extra": 1},
    ],
)
def test_a_request_record_the_stream_does_not_vouch_for_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(CodecError):
        parse_stream(_stream([{**GOOD, **change}]))


def test_a_request_record_without_a_field_is_refused() -> None:
    fields = dict(GOOD)
    del fields["thread"]
    with pytest.raises(CodecError):
        parse_stream(_stream([fields]))
