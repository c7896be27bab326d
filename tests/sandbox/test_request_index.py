"""A recorded server keeps a request index as it serves (issue 23, item 5): each HTTP/1.x
request's method, path, status, duration and the events it spans, for any framework, with no
configuration; `sealtrace requests` lists it and `--at request:N` asks about one request."""

from __future__ import annotations

import ast
import http.client
import itertools
import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox._checkpoints import CheckpointPolicy
from sealtrace.sandbox._errors import QueryError
from sealtrace.sandbox._inquiry import Inquiry, request_window
from sealtrace.sandbox._replay_process import load_recording
from sealtrace.sandbox.questions import Trace

from ..conftest import KeyFiles, run_cli
from .replaying import (
    PYTHON,
    assert_bit_exact,
    promotions_database,
    recorded_server,
    replay,
    trace_json,
    walk,
    without_passes,
    write_app,
)
from .test_threads import ASGI, _orders

pytestmark = pytest.mark.integration

SHOP = """
import threading

from flask import Flask, jsonify, request
from werkzeug.serving import WSGIRequestHandler, make_server

app = Flask(__name__)


@app.post("/price")
def price():
    body = request.get_json()
    total = round(body["qty"] * body["unit"] * (1 - body.get("discount", 0)), 2)
    return jsonify({"total": total})


@app.get("/item/<int:number>")
def item(number):
    return jsonify({"item": number, "token": request.args.get("token", "")[:0]})


@app.get("/stop")
def stop():
    threading.Thread(target=server.shutdown).start()
    return "bye"


WSGIRequestHandler.protocol_version = "HTTP/1.1"  # keep-alive: several requests a connection
server = make_server("127.0.0.1", 0, app, threaded=True)
print(server.server_port, flush=True)
server.serve_forever()
"""


def requests_json(store: Path, keys: KeyFiles) -> dict[str, Any]:
    proc = run_cli("requests", str(store), "--identity", str(keys.identity_path), "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _post(port: int, qty: int) -> float:
    body = json.dumps({"qty": qty, "unit": 9.99, "discount": 0.1 * (qty % 3)}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/price", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310 - loopback
        return float(json.loads(reply.read())["total"])


@dataclass
class Shop:
    store: Path
    began: float
    ended: float
    statuses: list[int]
    totals: list[float]


def record_shop(tmp_path: Path, keys: KeyFiles) -> Shop:
    """The Flask shop recorded on werkzeug's threaded server: six concurrent orders, then
    three requests one after another (one a 404), then /stop."""
    app = write_app(tmp_path / "shop", SHOP)
    store = tmp_path / "rec"
    began = time.time()
    totals: list[float] = []
    with recorded_server(keys, store, [PYTHON, str(app)]) as (recorder, port):
        clients = [
            threading.Thread(target=lambda q=q: totals.append(_post(port, q))) for q in range(1, 7)
        ]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        statuses = []
        for target in ("/item/1?token=s3cret", "/item/2", "/missing"):  # one after another
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            connection.request("GET", target)
            reply = connection.getresponse()
            reply.read()
            statuses.append(reply.status)
            connection.close()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/stop", timeout=60).read()
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    return Shop(store, began, time.time(), statuses, totals)


def test_a_threaded_flask_server_indexes_every_request_it_served(
    tmp_path: Path, keys: KeyFiles
) -> None:
    shop = record_shop(tmp_path, keys)
    store, began, ended = shop.store, shop.began, shop.ended
    assert shop.statuses == [200, 200, 404]

    doc = requests_json(store, keys)
    index = doc["requests"]
    assert doc["indexed"] is True and doc["count"] == len(index) == 10
    seen = sorted((r["method"], r["path"], r["status"]) for r in index if r["path"] != "/stop")
    assert seen == sorted(
        [("POST", "/price", 200)] * 6
        + [("GET", "/item/1", 200), ("GET", "/item/2", 200), ("GET", "/missing", 404)]
    )
    # /stop's handler thread (a daemon) may answer after the main thread has ended the
    # recording: then the index says the request was still open, with no status.
    (stop,) = (r for r in index if r["path"] == "/stop")
    assert (stop["status"], stop["complete"]) in ((200, True), (None, False))
    assert "s3cret" not in json.dumps(doc)  # the query string is never kept
    assert [r["number"] for r in index] == list(range(1, 11))
    assert [r["first"] for r in index] == sorted(r["first"] for r in index)

    _data, parsed = load_recording(str(store), keys.identity)
    events = parsed.events
    for r in index:
        if r is stop:
            continue
        assert r["complete"] is True
        assert began <= r["started"] <= r["started"] + r["duration"] <= ended
        span = events[r["first"] : r["last"] + 1]
        # The read that brought its request line, and the send of its status line, lie in
        # the span it names (other threads' events may lie there too).
        line = f"{r['method']} {r['path']}".encode()
        assert any(
            e.callee.startswith("socket.recv") and line in (parsed.decode(e) or b"") for e in span
        ), r
        status = f"HTTP/1.1 {r['status']} ".encode()
        assert any(e.data is not None and e.data.startswith(status) for e in span), r
    # Requests made one after another are indexed in that order. (Their spans may overlap:
    # a span is a bound over all threads' events, and the next connection's accept and read
    # can be recorded before the previous request's send has recorded its own, since an
    # event is recorded when its call returns: see request_counters in the next test.)
    one_by_one = [r for r in index if r["path"] in ("/item/1", "/item/2", "/missing")]
    assert [r["path"] for r in one_by_one] == ["/item/1", "/item/2", "/missing"]
    assert all(a["first"] < b["first"] for a, b in itertools.pairwise(one_by_one))

    text = run_cli("requests", str(store), "--identity", str(keys.identity_path))
    assert text.returncode == 0
    assert text.stdout.decode().count("'/price'") == 6
    assert "404" in text.stdout.decode()
    open_ = "still open when the recording ended" in text.stdout.decode()
    assert open_ is (stop["status"] is None)
    # The index is recorded beside the events: replay is as exact as without it.
    assert_bit_exact(*replay(keys, store))


_SEQ = ("/item/", "/missing")  # the requests made one after another


def _response(doc: dict[str, Any]) -> str:
    return str(doc["root"]["value"]["repr"])


# Alone: its session forks a checkpoint every 10,000 instructions, with no time budget to put
# one off, and gives each pass 60 s.
@pytest.mark.alone
def test_a_question_about_one_request_of_a_threaded_server_is_answered_from_checkpoints(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """`--at request:N` stops before the call that sent request N's last bytes (its body,
    here), in a session that takes checkpoints as the console's does. Checkpoints are forks,
    which keep one thread: one taken while a request's thread lived left the question that
    started from it waiting for that thread forever (the session's 120 s silence)."""
    shop = record_shop(tmp_path, keys)
    data, parsed = load_recording(str(shop.store), keys.identity)
    index = parsed.request_index()
    orders = [n for n, r in enumerate(index, 1) if r.path == "/price"]
    with Inquiry(
        data, parsed, timeout=60, checkpoints=CheckpointPolicy(10_000, 64, budget=0.0)
    ) as session:
        answered = []
        for number in orders:
            doc = session.trace(Trace(at=f"request:{number}", var="b", depth=4))
            answered.append(json.loads(ast.literal_eval(_response(doc)))["total"])
            assert doc["query"]["stopped_at"]["file"].endswith("socketserver.py")  # the send
        assert sorted(answered) == sorted(shop.totals)
        # The instructions each request spans, in the order the requests began.
        spans = [session.request_counters(n) for n in range(1, len(index) + 1)]
        assert all(0 < first <= last for first, last in spans)
        assert all(first < last for (first, last), r in zip(spans, index, strict=True) if r.status)
        one_by_one = [s for s, r in zip(spans, index, strict=True) if r.path.startswith(_SEQ)]
        assert len(one_by_one) == 3
        # Each began after the one before it had read its request: its client sent it only
        # once the answer before had come. Where each ends is the schedule's: an event is
        # recorded when its call returns, so the next request's read can come before the last
        # send of the one before it (seen, alone and under load).
        assert all(a[0] < b[0] for a, b in itertools.pairwise(one_by_one))
        assert session._replay is not None and len(session._replay.checkpoints) > 2
        with pytest.raises(QueryError, match="served 10 indexed requests"):
            session.trace(Trace(at="request:11", var="b", depth=4))


# One thread serves one connection at a time: the program is alone at each accept(), where
# a session keeps its checkpoints.
ONE_BY_ONE = """
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

RATES = {"GB": 0.2, "DE": 0.19}
PONG = json.dumps({"ok": True}).encode()  # made at start, sent as it is


class Prices(BaseHTTPRequestHandler):
    def do_POST(self):
        order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        subtotal = sum(item["price"] * item["qty"] for item in order["items"])
        total = round(subtotal * (1 + RATES[order["country"]]), 2)
        body = json.dumps({"total": total}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(PONG)))
        self.end_headers()
        self.wfile.write(PONG)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Prices)
print(server.server_address[1], flush=True)
for _ in range(int(sys.argv[1])):
    server.handle_request()
"""


def record_one_by_one(tmp_path: Path, keys: KeyFiles, requests: int) -> Path:
    app = write_app(tmp_path / "prices", ONE_BY_ONE)
    store = tmp_path / "one-by-one"
    with recorded_server(keys, store, [PYTHON, str(app), str(requests)]) as (recorder, port):
        for i in range(requests - 1):
            body = json.dumps(
                {"items": [{"price": 9.99, "qty": 1 + i}], "country": ("GB", "DE")[i % 2]}
            ).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/orders", data=body)
            with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310 - loopback
                reply.read()
        ping = f"http://127.0.0.1:{port}/ping"  # the last: answered with bytes made at start
        urllib.request.urlopen(ping, timeout=60).read()
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    return store


def test_in_a_session_a_question_about_one_request_starts_from_a_checkpoint_near_it(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """In a session (checkpoints, as the sandbox's), a trace at request:N follows the value
    back to the accept() of the request's connection: every pass starts from a checkpoint
    at or before that accept(), not from the run's start, and the first question keeps a
    checkpoint there for the next one. What came from before is marked, and the answer says
    it is not whole; whole_run widens it to the whole run's answer."""
    store = record_one_by_one(tmp_path, keys, 12)
    data, parsed = load_recording(str(store), keys.identity)
    index = parsed.request_index()
    assert len(index) == 12
    question = Trace(at="request:11", var="b", depth=64)
    with Inquiry(data, parsed) as plain:
        whole = plain.trace(question)
    # Checkpoints far apart: only the one before the first instruction, until questions
    # keep their own.
    sparse = CheckpointPolicy(10**9, 64)
    with Inquiry(data, parsed, timeout=60, checkpoints=sparse) as session:
        part = session.trace(question)
        server = session._replay
        assert server is not None
        accepted = index[10].accepted
        since = session._marked()[accepted][1]
        assert server.kept and all(k >= since for k in server.kept)
        starts: list[int] = []
        ask = server.ask

        def watched(
            query: dict[str, Any], start: int, edges: bool = False
        ) -> tuple[dict[str, Any], int]:
            starts.append(server.nearest(start, edges) or 0)
            return ask(query, start, edges)

        server.ask = watched  # type: ignore[method-assign]
        again = session.trace(question)
        server.ask = ask  # type: ignore[method-assign]
        widened = session.trace(Trace(at="request:11", var="b", depth=64, whole_run=True))
    # The same value, stopped at the same instruction, as the whole run.
    assert part["root"]["value"] == whole["root"]["value"]
    assert '"total":' in str(part["root"]["value"]["repr"])
    assert part["query"]["stopped_at"] == whole["query"]["stopped_at"]
    assert part["query"]["window"] == accepted and "window" not in whole["query"]
    # The request's own body (its socket read) is reached; every external origin of the
    # window is one of the whole run's.
    reads = {o for o in _origins(part, "external") if str(o[0]).startswith("socket.recv")}
    assert reads and _origins(part, "external") <= _origins(whole, "external")
    # RATES was made at import, before the window: marked, and the answer is not whole.
    assert _origins(part, "window") and part["query"]["truncated"] is True
    assert not _origins(whole, "window")
    # The second question started every pass (locate and slice, capture) from a checkpoint
    # at or after the accept() (the one the first kept): none replayed the requests before it.
    assert without_passes(again) == without_passes(part)
    assert len(starts) >= 2 and min(starts) >= since, (starts, since)
    # Widened: the whole run's answer, as a session with no checkpoints gives it.
    assert without_passes(widened) == without_passes(whole)


def test_a_windowed_question_about_a_value_made_before_the_request_says_so(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """The value asked about (bytes made at start, sent as they are) was made before the
    request's window: the session says so, and the whole run answers."""
    store = record_one_by_one(tmp_path, keys, 3)
    data, parsed = load_recording(str(store), keys.identity)
    with Inquiry(
        data, parsed, timeout=60, checkpoints=CheckpointPolicy(10_000, 64, budget=0.0)
    ) as session:
        with pytest.raises(QueryError, match="made before the traced window"):
            session.trace(Trace(at="request:3", var="b", depth=4))
        doc = session.trace(Trace(at="request:3", var="b", depth=4, whole_run=True))
    assert "window" not in doc["query"] and doc["root"]["value"]["repr"] == repr(b'{"ok": true}')


def _origins(doc: dict[str, Any], kind: str) -> set[tuple[Any, Any]]:
    return {
        (n["origin"]["call"], n["origin"]["event"])
        for n in walk(doc["root"])
        if (n["origin"] or {}).get("kind") == kind
    }


def test_a_question_about_one_request_traces_only_its_window(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """In-process, `--at request:N` replays without the engine up to the accept() of the
    request's connection and traces from there: the same value and the same external
    origins as tracing the whole run, in a fraction of the steps, and whatever was made
    before the window is marked as such (the answer says it is not whole), never dropped."""
    shop = record_shop(tmp_path, keys)
    data, parsed = load_recording(str(shop.store), keys.identity)
    index = parsed.request_index()
    number = next(n for n, r in enumerate(index, 1) if r.path == "/price")
    window = request_window(parsed, number)
    question = Trace(at=f"request:{number}", var="b", depth=64)
    with Inquiry(data, parsed) as whole_run:
        whole = whole_run.trace(question)
    with Inquiry(data, parsed, window=window) as windowed:
        part = windowed.trace(question)
    assert part["root"]["value"]["repr"] == whole["root"]["value"]["repr"]
    assert '"total":' in part["root"]["value"]["repr"]
    assert part["query"]["window"] == window and "window" not in whole["query"]
    assert part["query"]["stopped_at"]["counter"] * 10 < whole["query"]["stopped_at"]["counter"]
    # The request's own reads are reached, and every external origin the window names the
    # whole run names too, at the same event.
    reads = {o for o in _origins(part, "external") if str(o[0]).startswith("socket.recv")}
    assert reads and reads <= _origins(whole, "external")
    assert _origins(part, "external") <= _origins(whole, "external")
    # What came from before the window is marked, and the answer is not whole.
    assert _origins(part, "window") and part["query"]["truncated"] is True
    assert not _origins(whole, "window")
    # Negative control: a request whose connection was accepted after the window, asked
    # about in a window opened later, is not reached.
    with Inquiry(data, parsed, window=index[-1].accepted) as late, pytest.raises(QueryError):
        late.trace(question)


@pytest.mark.podman
def test_the_sandbox_answers_about_a_request_as_in_process(
    tmp_path: Path, keys: KeyFiles, podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    shop = record_shop(tmp_path, keys)

    def trace(*where: str, env: Any = None) -> dict[str, Any]:
        proc = run_cli(
            "trace", str(shop.store), "--identity", str(keys.identity_path), *where,
            "--at", "request:2", "--var", "b", "--json", env=env, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        doc: dict[str, Any] = json.loads(proc.stdout)
        return doc

    podman = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    plain = trace("--in-process", "--whole-run")
    boxed = trace("--whole-run", env=podman)
    # By default the sandbox traces from the request's connection on, from its checkpoints.
    windowed = trace(env=podman)

    def origins(doc: dict[str, Any]) -> set[tuple[str, Any]]:
        return {
            (n["origin"]["call"], n["origin"]["event"])
            for n in walk(doc["root"])
            if (n["origin"] or {}).get("call")
        }

    assert plain["root"]["value"]["type"] == boxed["root"]["value"]["type"] == "bytes"
    assert plain["query"]["stopped_at"]["line"] == boxed["query"]["stopped_at"]["line"]
    assert origins(boxed) == origins(plain)
    assert any(call.startswith("socket.recv") for call, _ in origins(plain))
    assert "window" not in boxed["query"]
    shown = ("type", "repr")  # (digests are keyed for each session)
    assert [windowed["root"]["value"][k] for k in shown] == [
        boxed["root"]["value"][k] for k in shown
    ]
    assert windowed["query"]["stopped_at"] == boxed["query"]["stopped_at"]
    assert windowed["query"]["window"] == request_window(
        load_recording(str(shop.store), keys.identity)[1], 2
    )
    assert any(call.startswith("socket.recv") for call, _ in origins(windowed))
    assert origins(windowed) <= origins(boxed)
    kinds = {(n["origin"] or {}).get("kind") for n in walk(windowed["root"])}
    assert "window" in kinds and windowed["query"]["truncated"] is True


def record_fastapi(tmp_path: Path, keys: KeyFiles) -> tuple[Path, Path, set[int]]:
    """FastAPI on uvicorn, recorded serving six orders: STAFF100 alone first (request 1),
    two at once, then three over one kept-alive connection. (The store, the database, the
    client sockets the last three used.)"""
    database = promotions_database(tmp_path / "shop.db")
    app = write_app(tmp_path / "shop", ASGI)
    promos = ["STAFF100", "TEN", "NONE", "TEN", "NONE", "TEN"]
    command = [PYTHON, str(app), str(database), str(len(promos))]
    store = tmp_path / "rec"
    with recorded_server(keys, store, command) as (recorder, port):

        def kept_alive(promos: list[str]) -> None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for promo in promos:
                body = json.dumps({"items": [{"price": 49.99, "qty": 1}], "promo": promo})
                connection.request(
                    "POST", "/orders", body, headers={"Content-Type": "application/json"}
                )
                reply = connection.getresponse()
                reply.read()
                sockets.add(id(connection.sock))
            connection.close()

        sockets: set[int] = set()
        _orders(port, promos[:3])  # STAFF100 alone first (request 1), then two at once
        kept_alive(promos[3:])  # then three over one connection
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    return store, database, sockets


def test_fastapi_under_uvicorn_indexes_requests_its_event_loop_served(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """One thread reads every connection (asyncio): requests are told apart by connection,
    and a kept-alive connection's requests one from the next."""
    store, database, sockets = record_fastapi(tmp_path, keys)
    assert len(sockets) == 1  # the three went over one connection
    index = requests_json(store, keys)["requests"]
    assert [(r["method"], r["path"], r["status"]) for r in index] == [("POST", "/orders", 200)] * 6
    assert {r["thread"] for r in index} == {0}  # the event loop read them all
    assert all(r["complete"] for r in index)
    # Request 1 is the STAFF100 order: `--at request:1` stops before the call that sent
    # the last bytes of its response, and the bytes trace to the promotions read.
    database.unlink()
    doc = trace_json(store, keys, "request:1", "data")
    calls = {(n["origin"] or {}).get("call") for n in walk(doc["root"])}
    assert doc["root"]["value"]["repr"] == """b'{"total":0.0}'"""
    assert "sqlite3.Cursor.fetchone" in calls, calls


@pytest.mark.podman
def test_the_sandbox_answers_about_a_fastapi_request_as_in_process(
    tmp_path: Path, keys: KeyFiles, podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    """uvicorn in the sandbox replays as in-process (it once diverged there: its logging
    set-up took a lock where the recording polled)."""
    store, database, _sockets = record_fastapi(tmp_path, keys)
    database.unlink()
    plain = trace_json(store, keys, "request:1", "data", "--whole-run")
    proc = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--at", "request:1",
        "--var", "data", "--whole-run", "--json",
        env={"SEALTRACE_PODMAN_SOCKET": podman_service[2]}, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    boxed = json.loads(proc.stdout)
    assert plain["root"]["value"]["repr"] == """b'{"total":0.0}'"""
    assert boxed["root"]["value"]["type"] == plain["root"]["value"]["type"] == "bytes"
    # (The sandbox names only the recorded sources' files; asyncio's is the image's.)
    where = ("counter", "line")
    assert [boxed["query"]["stopped_at"][k] for k in where] == [
        plain["query"]["stopped_at"][k] for k in where
    ]
    calls = {(n["origin"] or {}).get("call") for n in walk(boxed["root"])}
    assert "sqlite3.Cursor.fetchone" in calls, calls
    assert calls == {(n["origin"] or {}).get("call") for n in walk(plain["root"])}
