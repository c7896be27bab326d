"""Threaded programs record, replay exactly and trace across threads (issue 23, item 2).

Each program is recorded with the real recorder, its inputs are deleted, and it is replayed
(in-process: these tests wrote the programs). Replay serves every event to its own thread in
the recorded order, so a program whose threads share state through locks, queues and joins
replays bit-exact; a data race that takes replay elsewhere is a divergence that names the
threads. The provenance engine traces every thread: a value computed in a worker and read by
the main thread traces back through the worker to the read the worker made.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox._replay_process import load_recording

from ..conftest import KeyFiles
from .replaying import (
    PYTHON,
    assert_bit_exact,
    line_of,
    promotions_database,
    record,
    recorded_server,
    replay,
    trace_json,
    walk,
    write_app,
)

pytestmark = pytest.mark.integration

POOL = """
import os
from concurrent.futures import ThreadPoolExecutor


def size_of(name):
    with open(os.path.join("data", name), "rb") as f:
        data = f.read()
    return name, len(data)


names = sorted(os.listdir("data"))
with ThreadPoolExecutor(max_workers=3) as pool:
    results = list(pool.map(size_of, names))
total = sum(size for _name, size in results)
print(len(results), total)
"""

QUEUE = """
import queue
import random
import threading
import time

jobs = queue.Queue(maxsize=3)
done = []
lock = threading.Lock()


def produce(n):
    for i in range(n):
        jobs.put((i, random.randint(1, 1000)))
        time.sleep(0.001)
    jobs.put(None)


def consume(name):
    while True:
        job = jobs.get()
        if job is None:
            jobs.put(None)  # the next consumer stops too
            return
        with lock:
            done.append((name, job[0], job[1] * 2, time.monotonic() > 0))


consumers = [threading.Thread(target=consume, args=(f"c{i}",)) for i in range(3)]
for t in consumers:
    t.start()
producer = threading.Thread(target=produce, args=(40,))
producer.start()
producer.join()
for t in consumers:
    t.join()
print(len(done), sum(d[2] for d in done), [d[0] for d in done])
"""

RACE = """
import sys
import threading

counter = 0


def bump(n):
    global counter
    for _ in range(n):
        seen = counter
        sys.getrecursionlimit()  # a call: the interpreter may switch threads here
        counter = seen + 1


workers = [threading.Thread(target=bump, args=(300_000,)) for _ in range(2)]
for t in workers:
    t.start()
for t in workers:
    t.join()
print("counter", counter)
"""

SERVER = """
import sys
import threading

from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)
served = []
lock = threading.Lock()


@app.post("/price")
def price():
    body = request.get_json()
    total = round(body["qty"] * body["unit"] * (1 - body.get("discount", 0)), 2)
    with lock:
        served.append(total)
    return jsonify({"total": total})


@app.get("/stop")
def stop():
    threading.Thread(target=server.shutdown).start()
    return "bye"


server = make_server("127.0.0.1", 0, app, threaded=True)
print(server.server_port, flush=True)
server.serve_forever()
print("served", sorted(served))
"""

ASGI = """
import socket
import sqlite3
import sys

import uvicorn
from fastapi import FastAPI

DB, EXPECTED = sys.argv[1], int(sys.argv[2])
app = FastAPI()
served = []


def discount_for(code):
    with sqlite3.connect(DB) as db:
        row = db.execute("SELECT discount_pct FROM promotions WHERE code = ?", (code,)).fetchone()
    return row[0] if row else 0.0


@app.post("/orders")
def create_order(order: dict):  # a plain def: Starlette runs it on a worker thread
    subtotal = sum(item["price"] * item["qty"] for item in order["items"])
    pct = discount_for(order.get("promo"))
    total = round(subtotal * (1 - pct / 100), 2)
    served.append(total)
    if len(served) == EXPECTED:
        server.should_exit = True  # as SIGTERM would, but at a recorded point
    return {"total": total}


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(16)  # clients may connect as soon as they know the port
print(listener.getsockname()[1], flush=True)
server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
server.run(sockets=[listener])
"""

DJANGO = """
import json
import socketserver
import sqlite3
import sys
import threading

from django.conf import settings

settings.configure(
    DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["127.0.0.1"], SECRET_KEY="k" * 50,
    MIDDLEWARE=[], INSTALLED_APPS=[], USE_TZ=True,
)
import django

django.setup()
from django.core.servers.basehttp import WSGIRequestHandler, WSGIServer
from django.core.wsgi import get_wsgi_application
from django.http import JsonResponse
from django.urls import path

DB, EXPECTED = sys.argv[1], int(sys.argv[2])
served = []
finished = []
lock = threading.Lock()


def discount_for(code):
    with sqlite3.connect(DB) as db:
        row = db.execute("SELECT discount_pct FROM promotions WHERE code = ?", (code,)).fetchone()
    return row[0] if row else 0.0


def create_order(request):
    order = json.loads(request.body)
    subtotal = sum(item["price"] * item["qty"] for item in order["items"])
    pct = discount_for(order.get("promo"))
    total = round(subtotal * (1 - pct / 100), 2)
    with lock:
        served.append(total)
    return JsonResponse({"total": total})


urlpatterns = [path("orders", create_order)]


class ThreadedServer(socketserver.ThreadingMixIn, WSGIServer):  # as runserver makes it
    daemon_threads = True

    def shutdown_request(self, request):
        # The request's thread is done with it (its response sent): the server stops after
        # the last one. Stopped from the view instead, the main thread could end the run
        # while the last response was still being sent on its (daemon) thread.
        super().shutdown_request(request)
        with lock:
            finished.append(None)
            if len(finished) == EXPECTED:
                threading.Thread(target=self.shutdown).start()


server = ThreadedServer(("127.0.0.1", 0), WSGIRequestHandler)
server.set_app(get_wsgi_application())
print(server.server_address[1], flush=True)
server.serve_forever()
"""

STREAMS = """
import asyncio


async def handle(reader, writer):
    line = await reader.readline()
    writer.write(b"quote " + line.strip() + b" 42\\n")
    await writer.drain()
    writer.close()


async def main():
    server = await asyncio.start_server(handle, "localhost", 0)  # resolved in a thread
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("localhost", port)
    writer.write(b"MUG-01\\n")
    await writer.drain()
    reply = await reader.readline()
    writer.close()
    server.close()
    await server.wait_closed()
    value = int(reply.split()[-1]) * 2
    print(reply.decode().strip(), value)


asyncio.run(main())
"""

HEAD = """
for i in range(200_000):
    print("line", i)
"""

BEHAVIOUR = """
import _thread
import queue
import threading


class Pool:
    lock_class = threading.Lock  # a class attribute: never bound to the instance


pool = Pool()
lock = pool.lock_class()
print(type(lock).__name__ in ("lock", "LockProxy"), lock.acquire(False), lock.locked())
lock.release()
print(repr(threading.Lock).startswith("<built-in function allocate_lock"))
q = queue.SimpleQueue()
print(isinstance(q, queue.SimpleQueue), q.empty(), q.qsize())
q.put(1)
print(q.get(), q.empty())
seen = []
finished = threading.Lock()
finished.acquire()


def raw(value):
    seen.append(value)
    finished.release()


_thread.start_new_thread(raw, (5,))
t = threading.Thread(target=lambda: seen.append(6), name="named")
t.start()
t.join()
finished.acquire()
print(sorted(seen), t.name, t.is_alive())
"""


def _record(keys: KeyFiles, work: Path, source: str, **kwargs: Any) -> Path:
    app = write_app(work / "app", source)
    recorded = record(keys, work / "rec", [PYTHON, str(app)], cwd=work, **kwargs)
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    return work / "rec"


def _threads_of(keys: KeyFiles, location: Path) -> set[int]:
    _data, parsed = load_recording(str(location), keys.identity)
    return {e.thread for e in parsed.events}


def test_an_executor_over_files_replays_exactly_and_traces_into_its_workers(
    tmp_path: Path, keys: KeyFiles
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(1, 10):
        (data / f"part{i}.bin").write_bytes(bytes(range(256)) * i)
    rec = _record(keys, tmp_path, POOL)
    assert len(_threads_of(keys, rec)) >= 2  # the workers' reads are their own
    for path in data.iterdir():
        path.unlink()  # replay needs none of the files
    assert_bit_exact(*replay(keys, rec))
    doc = trace_json(rec, keys, "end", "total")
    _data, parsed = load_recording(str(rec), keys.identity)
    reads = {
        n["origin"]["event"]
        for n in walk(doc["root"])
        if (n["origin"] or {}).get("kind") == "external" and n["function"] == "size_of"
    }
    # The sizes were computed in the worker threads, from the reads those threads made.
    assert reads, "the total does not reach the workers' reads"
    assert {parsed.events[e].thread for e in reads} - {0}
    assert all(parsed.events[e].callee.startswith("file.read") for e in reads)
    constants = [
        n for n in walk(doc["root"])
        if (n["origin"] or {}).get("kind") == "constant" and n["op"].startswith("BUILD_")
    ]  # fmt: skip
    assert not constants, "a worker's result is not a constant of the main thread's"


def test_a_producer_and_consumers_sharing_a_queue_replay_exactly(
    tmp_path: Path, keys: KeyFiles
) -> None:
    rec = _record(keys, tmp_path, QUEUE)
    assert _threads_of(keys, rec) >= {0, 1, 2, 3, 4}
    receipt = assert_bit_exact(*replay(keys, rec))
    assert receipt["outputs_matched"] > 0


def test_a_threaded_flask_server_under_concurrent_clients_replays_and_traces(
    tmp_path: Path, keys: KeyFiles
) -> None:
    app = write_app(tmp_path / "shop", SERVER)
    with recorded_server(keys, tmp_path / "rec", [PYTHON, str(app)]) as (recorder, port):
        answers: list[float] = []

        def order(qty: int) -> None:
            body = json.dumps({"qty": qty, "unit": 9.99, "discount": 0.1 * (qty % 3)}).encode()
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/price", data=body,
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310 - loopback
                answers.append(json.loads(reply.read())["total"])

        clients = [threading.Thread(target=order, args=(qty,)) for qty in range(1, 9)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/stop", timeout=60).read()
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    assert len(answers) == 8
    rec = tmp_path / "rec"
    assert len(_threads_of(keys, rec)) >= 4  # request handlers on threads of their own
    assert_bit_exact(*replay(keys, rec))
    doc = trace_json(rec, keys, f"app.py:{line_of(SERVER, 'total = round(') + 1}", "total")
    calls = {(n["origin"] or {}).get("call") for n in walk(doc["root"])}
    # The total of a request handled on a server thread reaches that request's body, read
    # from its socket.
    assert calls & {"socket.recv_into", "socket.recv"}, calls


def test_a_data_race_is_replayed_or_reported_naming_the_threads(
    tmp_path: Path, keys: KeyFiles
) -> None:
    rec = _record(keys, tmp_path, RACE)
    proc, receipt = replay(keys, rec)
    assert receipt is not None
    if receipt["status"] == "bit-exact":  # the schedule happened to be one replay makes
        assert proc.returncode == 0
        return
    assert receipt["status"] == "diverged" and proc.returncode == 3
    named = {t["name"] for t in receipt["divergence"]["threads"]}
    assert {"Thread-1 (bump)", "Thread-2 (bump)"} <= named, receipt["divergence"]
    assert "data race" in proc.stderr.decode() or "threads" in proc.stderr.decode()


def test_the_proxies_behave_as_the_real_objects(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(tmp_path / "app", BEHAVIOUR)
    plain = subprocess.run([PYTHON, str(app)], capture_output=True, timeout=60, check=True)
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert rec.proc.returncode == 0, rec.proc.stderr.decode()
    assert rec.proc.stdout == plain.stdout
    assert assert_bit_exact(*replay(keys, tmp_path / "rec"))["outputs_matched"] > 0


def test_asyncio_streams_by_host_name_replay_and_trace_across_await(
    tmp_path: Path, keys: KeyFiles
) -> None:
    rec = _record(keys, tmp_path, STREAMS)
    _data, parsed = load_recording(str(rec), keys.identity)
    resolved = [e for e in parsed.events if e.callee.endswith("getaddrinfo")]
    assert resolved and {e.thread for e in resolved} - {0}  # in the loop's executor
    assert_bit_exact(*replay(keys, rec))
    line = next(i for i, x in enumerate(STREAMS.splitlines(), 1) if x.strip().startswith("print("))
    doc = trace_json(rec, keys, f"app.py:{line}", "value")
    calls = {(n["origin"] or {}).get("call") for n in walk(doc["root"])}
    assert calls & {"socket.recv", "socket.recv_into"}, calls


HANDOFFS = """
import asyncio
import sys
import threading
import time

sys.setswitchinterval(1e-6)  # threads switch every microsecond or so: every race shows


async def main():
    loop = asyncio.get_running_loop()
    seen = []

    def worker(k):
        for i in range(150):
            loop.call_soon_threadsafe(seen.append, (k, i))
            if i % 10 == 0:
                time.monotonic()  # a call of the worker's own, between handoffs

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    ticks = []
    while len(seen) < 450:
        ticks.append(len(seen))  # what the loop had seen at each of its turns
        time.monotonic()
        await asyncio.sleep(0)
    for t in threads:
        t.join()
    done = await loop.run_in_executor(None, sum, [k * 1000 + i for k, i in seen[:50]])
    print(len(ticks), ticks, seen, done)


asyncio.run(main())
"""


@pytest.mark.alone  # its control needs a schedule that other tests' load does not serialise
def test_callbacks_handed_to_an_event_loop_arrive_where_they_did_when_recorded(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """Worker threads hand the loop callbacks (call_soon_threadsafe, as anyio's and
    run_in_executor's workers do) while the loop turns; which of its turns sees which depends
    on the schedule alone. Unpatched, a replay could see one a turn earlier or later than the
    recording did (a FastAPI endpoint's worker back on anyio's idle list, or not, when the
    next request came): here, with threads switching every microsecond, that made three of
    five replays diverge."""
    app = write_app(tmp_path / "app", HANDOFFS)
    plain: set[bytes] = set()
    for _ in range(4):  # by itself two runs differ; a busy machine may run a thread to its end
        plain.add(subprocess.run([PYTHON, str(app)], capture_output=True, timeout=60,
                                 check=True).stdout)  # fmt: skip
        if len(plain) == 2:
            break
    assert len(plain) == 2  # the control: the schedule decides what the program prints
    for attempt in range(3):
        work = tmp_path / f"run{attempt}"
        work.mkdir()
        rec = _record(keys, work, HANDOFFS)
        _data, parsed = load_recording(str(rec), keys.identity)
        handed = [e for e in parsed.events if e.callee == "asyncio.call_soon_threadsafe"]
        taken = [parsed.decode(e) for e in parsed.events if e.callee == "asyncio.handoffs"]
        assert len(handed) >= 450 and {e.thread for e in handed} >= {1, 2, 3}
        assert sum(taken) >= 450  # each handed over, taken by the loop at a self-pipe read
        assert assert_bit_exact(*replay(keys, rec))["outputs_matched"] > 0


def test_a_program_piped_into_head_behaves_as_unrecorded(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(tmp_path / "app", HEAD)
    exe = Path(sys.executable).with_name("sealtrace")

    def through_head(command: list[str]) -> tuple[bytes, bytes, int]:
        shell = f"{' '.join(command)} 2>{tmp_path}/err | head -2"
        out = subprocess.run(["bash", "-c", f"set -o pipefail; {shell}"], capture_output=True,
                             timeout=120, check=False)  # fmt: skip
        return out.stdout, (tmp_path / "err").read_bytes(), out.returncode

    plain = through_head([PYTHON, str(app)])
    recorded = through_head(
        [str(exe), "record", "--recipient", str(keys.recipient_path), "--output",
         str(tmp_path / "rec"), "--", PYTHON, str(app)]
    )  # fmt: skip
    assert recorded[0] == plain[0] == b"line 0\nline 1\n"
    assert recorded[2] == plain[2]  # the program's own exit status, through the pipe
    # The broken pipe's traceback is the program's, with none of sealtrace's frames.
    assert b"BrokenPipeError" in recorded[1] and b"BrokenPipeError" in plain[1]
    assert b"sealtrace" not in recorded[1] and b"_boundary" not in recorded[1], recorded[1]


SOCKET_SURFACE = """
import socket

a, b = socket.socketpair()
a.set_inheritable(True)
print(a.get_inheritable(), a.proto)
a.sendmsg([b"pri", b"ce 42"])
print(b.recvmsg(64)[0])
a.sendmsg([b"0123456789"])
head, tail = bytearray(4), bytearray(10)
n = b.recvmsg_into([head, tail])[0]
print(n, bytes(head), bytes(tail[: n - 4]))
"""


def test_a_socket_offers_every_method_a_real_one_has(tmp_path: Path, keys: KeyFiles) -> None:
    """Issue 23, item 1: werkzeug's app.run() calls set_inheritable on its listening socket,
    which the proxy once lacked. Every public name of socket.socket is on the proxy, and the
    ones added record and replay."""
    import socket

    from sealtrace.proxy._net_boundary import Socket

    assert not sorted(n for n in dir(socket.socket) if not n.startswith("_") and
                      not hasattr(Socket, n) and n != "proto")  # fmt: skip
    app = write_app(tmp_path / "app", SOCKET_SURFACE)
    plain = subprocess.run([PYTHON, str(app)], capture_output=True, timeout=60, check=True)
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert rec.proc.returncode == 0, rec.proc.stderr.decode()
    assert rec.proc.stdout == plain.stdout
    assert_bit_exact(*replay(keys, tmp_path / "rec"))


def _orders(port: int, promos: list[str], path: str = "/orders") -> dict[str, float]:
    """The first order alone, then the others concurrently; each promo's total."""
    answers: dict[str, float] = {}
    failed: list[BaseException] = []

    def order(promo: str) -> None:
        body = json.dumps({"items": [{"price": 49.99, "qty": 1}], "promo": promo}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}", data=body,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310
                answers[promo] = json.loads(reply.read())["total"]
        except BaseException as exc:
            failed.append(exc)

    order(promos[0])  # first, alone: the request the traces ask about
    clients = [threading.Thread(target=order, args=(p,)) for p in promos[1:]]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    assert not failed, failed  # (the server would wait for the request that failed)
    return answers


def _serve_orders_and_trace(
    tmp_path: Path, keys: KeyFiles, source: str
) -> tuple[Path, dict[str, Any]]:
    """The shop `source` recorded while serving four orders (STAFF100 first, alone), its
    database deleted, replayed bit-exact; the first order's total traced (the recording and
    the trace). The total is £0.00 and reaches its promotions row and its request's body."""
    database = promotions_database(tmp_path / "shop.db")
    app = write_app(tmp_path / "shop", source)
    promos = ["STAFF100", "TEN", "NONE", "TEN"]
    command = [PYTHON, str(app), str(database), str(len(promos))]
    with recorded_server(keys, tmp_path / "rec", command) as (recorder, port):
        answers = _orders(port, promos)
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    assert answers == {"STAFF100": 0.0, "TEN": 44.99, "NONE": 49.99}
    database.unlink()
    rec = tmp_path / "rec"
    assert_bit_exact(*replay(keys, rec))
    doc = trace_json(rec, keys, f"app.py:{line_of(source, 'total = round(') + 1}", "total")
    calls = {(n["origin"] or {}).get("call") for n in walk(doc["root"])}
    assert doc["root"]["value"]["repr"] == "0.0"  # the first request's: STAFF100
    assert "sqlite3.Cursor.fetchone" in calls, calls
    assert calls & {"socket.recv", "socket.recv_into"}, calls
    return rec, doc


def test_a_django_view_on_its_threaded_server_replays_and_traces_to_the_database_read(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """Django served by its own WSGI server (runserver's: threaded) under concurrent
    clients; the database deleted before replay."""
    rec, _doc = _serve_orders_and_trace(tmp_path, keys, DJANGO)
    assert len(_threads_of(keys, rec)) >= 4  # a thread per request
    # Its request index, with no configuration.
    _data, parsed = load_recording(str(rec), keys.identity)
    index = parsed.request_index()
    assert [(r.method, r.path, r.status) for r in index] == [("POST", "/orders", 200)] * 4


def test_fastapi_under_uvicorn_replays_and_traces_to_the_database_read(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """FastAPI served by uvicorn (asyncio, h11, a plain-def endpoint on Starlette's worker
    threads) under concurrent clients; the database deleted before replay. The first
    request's total (STAFF100's £0.00) reaches its promotion row, read on a worker thread,
    and its body, read from the connection by the event loop on the main thread."""
    rec, doc = _serve_orders_and_trace(tmp_path, keys, ASGI)
    assert len(_threads_of(keys, rec)) >= 2  # the endpoint ran on a worker thread
    assert doc["query"]["truncated"] is False
