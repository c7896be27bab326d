"""The request index's reading of a connection (proxy/_requests.py) and its records in the
event stream: what counts as a request, its status, where it begins and ends, and that a
REQUEST record the stream does not vouch for is refused."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
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
    "accepted": 0,
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


# -- the count the recorder reports to `sealtrace record --server` ----------------------------

SERVES = """
import os
import socket
import sys

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(4)
# Its descriptors that lead to the summary's FIFO (sealtrace record's private directory).
summary_fds = 0
for fd in os.listdir("/proc/self/fd"):
    try:
        summary_fds += "sealtrace-summary-" in os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
print(summary_fds, listener.getsockname()[1], flush=True)
for _ in range(int(sys.argv[1])):
    conn, _ = listener.accept()
    conn.recv(4096)
    conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")
    conn.close()
"""

# Puts a file of its own where the summary's FIFO was (its path is in the recorder's command
# line): the recorder must not write there.
HIJACKS = """
import json
import os
import sys

argv = open("/proc/self/cmdline", "rb").read().split(b"\\0")
fifo = json.loads(next(a for a in argv if a.startswith(b"{")))["summary_fifo"]
os.unlink(fifo)
os.link(sys.argv[1], fifo)
print("replaced", flush=True)
"""


# Runs `run_recorded` with a summary, as `sealtrace record --server` does (in a process of its
# own: it handles signals, which only a main thread may), and prints the summary last.
DRIVER = """
import json
import pathlib
import sys

from sealtrace.proxy import Recipient
from sealtrace.proxy._recording_cli import run_recorded

summary = {} if sys.argv[1] == "summary" else None
code = run_recorded(Recipient.load(pathlib.Path(sys.argv[2])), sys.argv[3], sys.argv[4:],
                    summary=summary)
print(json.dumps({"code": code, "summary": summary}), flush=True)
"""


def _summary_of(
    tmp_path: Path, keys: Any, source: str, *args: str, clients: int = 0, summary: bool = True
) -> tuple[Any, list[str]]:
    """(the summary run_recorded gave, the program's stdout lines before it)."""
    import socket
    import subprocess

    app = tmp_path / "app.py"
    app.write_text(source)
    store = tmp_path / ("rec" if summary else "rec-plain")
    command = [sys.executable, "-c", DRIVER, "summary" if summary else "none",
               str(keys.recipient_path), str(store), sys.executable, str(app), *args]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    lines = []
    if clients:
        lines.append(proc.stdout.readline().decode())
        port = int(lines[0].split()[1])
        for _ in range(clients):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
                client.sendall(b"GET /ping HTTP/1.0\r\n\r\n")
                while client.recv(4096):
                    pass
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    *rest, last = out.decode().splitlines()
    doc = json.loads(last)
    assert doc["code"] == 0
    return doc["summary"], lines + rest


def test_the_recorder_reports_how_many_requests_it_indexed(tmp_path: Path, keys: Any) -> None:
    summary, lines = _summary_of(tmp_path, keys, SERVES, "3", clients=3)
    ((run_id, counted),) = summary.pop("runs")  # the one run (no rotation) and its count
    assert summary == {"requests": 3} and counted == 3 and run_id.startswith("run-")
    # The program holds no descriptor of the summary's FIFO: the recorder opens it only to
    # write the summary at the end. (Comparing the program's first free descriptor number
    # with a run without a summary was racy: the recorder's own writer may hold one a moment.)
    assert lines[0].split()[0] == "0"
    # The negative control: the same look finds a descriptor of such a FIFO where there is one.
    fifo_dir = tmp_path / "sealtrace-summary-control"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "summary")
    held = os.open(fifo_dir / "summary", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert any(
            "sealtrace-summary-" in os.readlink(f"/proc/self/fd/{fd}")
            for fd in os.listdir("/proc/self/fd")
            if os.path.exists(f"/proc/self/fd/{fd}")
        )
    finally:
        os.close(held)


def test_a_program_that_replaced_the_summary_fifo_gets_nothing_written(
    tmp_path: Path, keys: Any
) -> None:
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"")
    summary, lines = _summary_of(tmp_path, keys, HIJACKS, str(mine))
    assert lines == ["replaced"]
    assert summary == {}
    assert mine.read_bytes() == b""
