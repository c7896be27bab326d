"""A gunicorn gthread worker, recorded as its arbiter forked it, replays bit-exact and answers.

gunicorn runs the WSGI app in a worker process its arbiter forks; the gthread worker serves
each connection on a thread of a pool, polls with a selector, beats its heartbeat by
fchmod on a temporary file and wakes itself through a pipe whose descriptors it makes
non-blocking with fcntl. Recorded with no configuration, the worker is process 1 of the run
(tests/sandbox/test_forks.py): with the database deleted, `--process 1` replays it bit-exact,
its request index lists what it served, and a request's total traces to the promotions read
and to the request line read from the connection.

The arbiter reaps its workers on SIGCHLD and stops on SIGTERM: the handlers' deliveries are
recorded, so the arbiter and the worker it forks after the first one ends replay bit-exact
too.
"""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import (
    PYTHON,
    assert_bit_exact,
    line_of,
    promotions_database,
    recorded_server,
    replay,
    trace_json,
    walk,
    write_app,
)

pytestmark = pytest.mark.integration

APP = """\
import sqlite3
from urllib.parse import parse_qs

DATABASE = {database!r}


def application(environ, start_response):
    query = parse_qs(environ["QUERY_STRING"])
    qty, code = int(query["qty"][0]), query["code"][0]
    with sqlite3.connect(DATABASE) as db:
        row = db.execute("SELECT discount_pct FROM promotions WHERE code = ?", (code,)).fetchone()
    db.close()
    discount = row[0] if row else 0.0
    total = round(qty * 9.99 * (1 - discount / 100), 2)
    body = f"{{total}}\\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
"""

# The port gunicorn bound (port 0: any free one), on stdout once the arbiter is ready.
CONFIG = """\
def when_ready(server):
    print(server.LISTENERS[0].getsockname()[1], flush=True)
"""

ORDERS = {"STAFF100": 0.0, "TEN": 17.98, "NONE": 19.98}


def _order(port: int, code: str, answers: dict[str, str]) -> None:
    url = f"http://127.0.0.1:{port}/price?qty=2&code={code}"
    with urllib.request.urlopen(url, timeout=60) as reply:
        answers[code] = reply.read().decode().strip()


def test_a_gunicorn_gthread_worker_replays_bit_exact_and_traces_a_request(
    tmp_path: Path, keys: KeyFiles, replay_image: str
) -> None:
    database = promotions_database(tmp_path / "promotions.db")
    app_dir = tmp_path / "app"
    source = APP.format(database=str(database))
    write_app(app_dir, source, "shop.py")
    config = write_app(app_dir, CONFIG, "gunicorn_conf.py")
    store = tmp_path / "rec"
    command = [
        PYTHON, "-m", "gunicorn", "--config", str(config), "--chdir", str(app_dir),
        "--workers", "1", "--worker-class", "gthread", "--threads", "4",
        "--max-requests", str(len(ORDERS)), "--no-control-socket",
        "--bind", "127.0.0.1:0", "shop:application",
    ]  # fmt: skip
    with recorded_server(keys, store, command, "--app-root", str(app_dir)) as (recorder, port):
        answers: dict[str, str] = {}
        clients = [threading.Thread(target=_order, args=(port, code, answers)) for code in ORDERS]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        recorder.terminate()  # passed on to the arbiter, which stops its workers
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    assert answers == {code: str(total) for code, total in ORDERS.items()}
    database.unlink()

    processes = run_cli("inspect", str(store))
    assert b"process 1 " in processes.stdout, processes.stdout
    worker = assert_bit_exact(*replay(keys, store, "--process", "1"))
    assert worker["exit_status"]["recorded"] == 0  # it ended itself after --max-requests
    # In the sandbox too, where the directory gunicorn changed to (--chdir) does not exist.
    assert_bit_exact(*replay(keys, store, "--sandbox", "--process", "1"))
    listed = run_cli(
        "requests", str(store), "--identity", str(keys.identity_path), "--process", "1"
    )
    assert listed.returncode == 0, listed.stderr.decode()
    served = [line for line in listed.stdout.decode().splitlines() if " GET " in line]
    assert served and all(" 200 " in line for line in served), listed.stdout.decode()

    # The £0.00 order's total. Which of the three concurrent requests reached the line first
    # was the schedule's choice (the one without a promotion row has none to trace to).
    line = f"{app_dir / 'shop.py'}:{line_of(source, 'body = f')}"
    totals = []
    for hit in range(1, len(ORDERS) + 1):
        doc = trace_json(store, keys, f"{line}#{hit}", "total", "--process", "1")
        totals.append(doc["root"]["value"]["repr"])
        if totals[-1] == repr(ORDERS["STAFF100"]):
            break
    assert len(set(totals)) == len(totals), totals  # each hit a request of its own
    assert set(totals) <= {repr(t) for t in ORDERS.values()}, totals
    assert totals[-1] == repr(ORDERS["STAFF100"]), totals
    calls = {(node.get("origin") or {}).get("call") for node in walk(doc["root"])}
    assert "sqlite3.Cursor.fetchone" in calls, calls
    assert calls & {"socket.recv", "socket.recv_into"}, calls

    # The arbiter reaped its worker on a SIGCHLD, forked another and stopped on the
    # SIGTERM, which it passed on to that worker: signals are recorded where their handlers
    # ran (tests/sandbox/test_signals.py), so both replay bit-exact too.
    assert_bit_exact(*replay(keys, store))
    processes_now = run_cli("inspect", str(store)).stdout
    if b"process 2 " in processes_now:  # the worker it forked after the first one ended
        assert_bit_exact(*replay(keys, store, "--process", "2"))


def test_a_gunicorn_worker_rotated_by_requests_replays_each_of_its_runs(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """`--rotate-requests` in a forked worker: the worker's runs are its own ("rec-p1.2",
    "rec-p1.3", ...: the recording's name, the process's path, the run's number), each read
    after the arbiter's run up to the fork and the worker's stream before it; each replays
    bit-exact with the database deleted, and the last one's request index holds every
    request the worker served."""
    database = promotions_database(tmp_path / "promotions.db")
    app_dir = tmp_path / "app"
    write_app(app_dir, APP.format(database=str(database)), "shop.py")
    config = write_app(app_dir, CONFIG, "gunicorn_conf.py")
    store = tmp_path / "rec"
    command = [
        PYTHON, "-m", "gunicorn", "--config", str(config), "--chdir", str(app_dir),
        "--workers", "1", "--worker-class", "gthread", "--threads", "2",
        "--no-control-socket", "--bind", "127.0.0.1:0", "shop:application",
    ]  # fmt: skip
    options = ("--app-root", str(app_dir), "--rotate-requests", "2")
    with recorded_server(keys, store, command, *options) as (recorder, port):
        answers: dict[str, str] = {}
        for _ in range(3):
            for code in ORDERS:  # one after another: each run ends between requests
                _order(port, code, answers)
        recorder.terminate()
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    assert answers == {code: str(total) for code, total in ORDERS.items()}
    database.unlink()
    worker_runs = sorted(tmp_path.glob("rec-p1.*"), key=lambda p: int(p.suffix[1:]))
    # A run rotates between requests, once two were recorded since it began: 9 requests one
    # after another make 4 runs after the worker's first. When the next request is under way
    # before the last one's end is recorded (a loaded machine), that rotation waits for the
    # next idle moment, or for twice the count: fewer runs, never a request lost (every run
    # replays bit-exact, and the last one's index holds all 9).
    numbers = [int(p.suffix[1:]) for p in worker_runs]
    assert numbers == list(range(2, 2 + len(numbers))) and 2 <= len(numbers) <= 4, numbers
    for run in worker_runs:
        assert_bit_exact(*replay(keys, run))
    listed = run_cli("requests", str(worker_runs[-1]), "--identity", str(keys.identity_path),
                     "--json")  # fmt: skip
    assert listed.returncode == 0, listed.stderr.decode()
    assert listed.stdout.count(b'"/price"') == 9
    assert_bit_exact(*replay(keys, store))  # the arbiter's run did not rotate
