"""What recording costs a program: recorded against plain runs of the same workloads, in one run.

Every workload is a small script written to a temporary directory and run in a fresh process,
plain (`python workload.py ...`) and recorded (`sealtrace record ... -- python workload.py ...`).
Plain and recorded runs are interleaved, alternating which goes first, for several repeats, and
the figures are medians. Every workload runs at two sizes, and each figure is given two ways:

- **in-process**: the workload times its own loop, in pieces, with time.perf_counter_ns.
  Recording does not change what a clock returns, only what reading it costs (one
  intercepted call per piece). For the per-call figures a run's figure is its fastest piece
  (an eighth of the calls loop), and overheads are the median over repeats of recorded
  against plain of the same repeat, two runs made one after the other.
- **difference**: the parent times each whole process, and the steady-state cost is
  (wall(large) - wall(small)) / (large - small). This also counts the work that grows with
  the run but happens after the loop (sealing the end of the recording), but the noise of
  process start-up lands on it too.

The I/O-bound and pure-Python overheads, which the targets are checked on, come from
**lock-step** runs (Bench.lockstep): a plain and a recorded run of the large size at once,
their main threads on the same CPU, taking turns piece by piece (50 requests, or one unit
of pure Python), which goes first changing every pair. On a shared virtual machine the
CPU's speed drifts by up to 70 % from one second to the next, and one vCPU can run at two
thirds of the other's speed for seconds: two runs one after the other, or on different
vCPUs, differ by more than the targets. The two pieces of a pair run milliseconds apart on
the same CPU. The overhead is the recorded pieces' total time against the plain pieces'
total over every pair but each run's first two (SKIPPED_PAIRS; so the recorder's periodic
work, sealing every 64 KiB, counts in full); the median over pairs and each run's own figure
show the spread. The pieces go P R, R P, P R ...: the run that goes first in a pair has just
run the last piece of the pair before, its caches warm, so each run goes first in as many
counted pairs as the other (a workload's pieces less SKIPPED_PAIRS are even).
One pair of processes can differ from the next by several points even so, so the figure
comes with a 95 % interval, from resampling whole runs (a bootstrap over runs), and a
target is **met** only when the whole interval is within it, **NOT met** when the whole
interval is above it, and **not settled** otherwise. `--lockstep N` sets the number of
lock-step runs (default 20); the interval narrows as their square root. It covers the
spread between pairs of processes, not what changes between batches made minutes apart,
which has been larger: read a verdict near the target with that in mind. The method's
negative control: `--control N` lock-step runs of the I/O workload (default 10) in which
neither run is recorded, whose interval must hold 0. When it does not, the method was off in
that batch, and the I/O verdict is **not settled (control failed)** whatever its interval.

Workloads:

- **Per intercepted call**: time.time(); os.urandom(16); a 64-byte send and recv on a
  loopback TCP socket from socket.create_connection, echoed by a plain _socket peer in the
  same thread that is never intercepted; a sqlite3 SELECT by key on a file database
  (execute + fetchone). The events per iteration come from the recordings,
  (events(N) - events(0)) / N. Overhead per intercepted call is
  (recorded - plain ns per iteration) / events per iteration.
- **Bytes per event**: everything the recording stored (header and segments), marginal:
  (bytes(N) - bytes(0)) / (events(N) - events(0)).
- **I/O-bound**: HTTP GETs with http.client, one new connection per request as urllib makes
  them, to a ThreadingHTTPServer in a separate process that is not recorded (a 2 KiB body),
  and each response stored in a sqlite3 file database (an INSERT, a SELECT by key, a commit
  every 10 requests). The loop's CPU time on the application's thread is given too: what
  recording adds to a request, without the waiting for the server.
- **Pure Python**: n-body steps and dict and str work, with no boundary call in the loop.
- **Threaded servers** (issue 23): a ThreadingHTTPServer, a thread per connection, each
  request a sqlite3 SELECT on a per-thread connection, a file read and a clock read, served
  to concurrent clients of the bench process (a new connection a request); a pair is a
  plain and a recorded server under the same load, and control pairs record neither.
  Given as throughput (requests a second) and as the server's CPU time a request (every
  thread, the recorder's own included). Two of them:
  - **I/O-bound** (the target, <= 5 % throughput, `threaded_server`): each request also
    asks a backend service over HTTP (a new connection, as `http.client` makes it), a
    process of its own that is not recorded and answers in UPSTREAM_MS (20 ms, a database
    query or another service's answer); 16 clients. The server waits on I/O, as the
    services the issue names do; its CPUs are not what limits it. The two servers of a
    pair run **side by side**: each client sends every request to both, which goes first
    alternating, and a server's throughput is its requests over the time the clients
    waited on it. Both meet the same moments of the machine, whose speed drifts by tens of
    percent between runs made one after the other.
  - **CPU-bound** (reported beside it, `threaded_server_cpu_bound`): no backend; 8 clients,
    one Python process on the same two CPUs, keep the CPUs busy, so throughput falls by
    what recording costs in CPU. One server after the other (which goes first changing
    every pair): at once they would share the CPUs. Its CPU figure, steadier than its
    throughput, is what a server its clients saturate would lose.
  `--threaded-only` runs these two alone.

"Recorder startup" is recorded minus plain wall time of a run of size 0 (median over the
calls and pure-Python workloads): the `sealtrace record` launcher, the recorder's start in
the child, and sealing the end of the recording.

Children run with PYTHONHASHSEED=0 and a bytecode cache in the temporary directory (warmed
before measuring), so start-up is not inflated where PYTHONDONTWRITEBYTECODE is set.
Targets: <= 2 us per intercepted call, <= 3 % on the I/O-bound workload, <= 1 % on pure
Python.

    python bench/record_overhead.py [--repeats N] [--lockstep N] [--control N] [--quick]
                                    [--json PATH]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _machine import machine

from sealtrace.proxy import Identity, write_keypair
from sealtrace.sandbox import load_recording

TARGET_CALL_NS = 2000.0
TARGET_IO = 0.03
TARGET_CPU = 0.01

CALLS_WORKLOAD = r"""
import _socket, json, os, socket, sqlite3, sys, time

kind, n, db = sys.argv[1], int(sys.argv[2]), sys.argv[3]
PIECES = 8
if kind == "time.time":
    f = time.time
    def body(n):
        for _ in range(n):
            f()
elif kind == "os.urandom":
    f = os.urandom
    def body(n):
        for _ in range(n):
            f(16)
elif kind == "socket":
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    a = socket.create_connection(listener.getsockname())
    a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    peer = _socket.socket(fileno=listener._accept()[0])
    peer.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
    msg = b"x" * 64
    def recv_all(sock, size):
        got = sock.recv(size)
        while len(got) < size:
            got += sock.recv(size - len(got))
    def body(n):
        for _ in range(n):
            a.send(msg)
            recv_all(peer, 64)
            peer.send(msg)
            recv_all(a, 64)
elif kind == "sqlite3":
    conn = sqlite3.connect(db)
    def body(n):
        for i in range(n):
            conn.execute("SELECT v FROM t WHERE k = ?", (i % 1000,)).fetchone()
else:
    raise SystemExit(f"unknown kind {kind}")
clock = time.perf_counter_ns
pieces = []
for _ in range(PIECES if n else 0):
    start = clock()
    body(n // PIECES)
    pieces.append(clock() - start)
print(json.dumps({"loop_ns": sum(pieces), "piece_ns": pieces, "per_piece": n // PIECES}))
"""

# Put before a workload: taking turns with the other run of a lock-step pair (Bench.lockstep),
# when the bench passes a conductor's socket, this run's mode and a CPU. The run's main thread
# keeps to that CPU, the same for both runs of a pair: on a shared virtual machine one vCPU can
# run at two thirds of the other's speed for seconds at a time. The recorder's own thread,
# started before, may still run on any CPU. Turns are taken on a bare _socket, which the
# recorder does not replace, so they are not recorded, and outside the timed pieces; a run
# ends (and a recording is sealed) only when both runs have done their last piece.
# Every run, plain or recorded, first moves the objects it has to the permanent generation
# (gc.freeze), as the recorder does when it starts: otherwise a plain run's collections scan
# all of start-up's objects and a recorded run's do not, which made recorded pure Python
# about 3 % faster than plain and would flatter every figure here.
TURNS = r"""
import _socket, gc, os

gc.freeze()

class Turns:
    def __init__(self, argv):
        self.sock = None
        if len(argv) == 3:
            os.sched_setaffinity(0, {int(argv[2])})
            self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            self.sock.connect(argv[0])
            self.sock.sendall(argv[1].encode()[:1])

    def wait(self):
        if self.sock is not None and self.sock.recv(1) != b"g":
            raise SystemExit("the bench's conductor went away")

    def done(self, last):
        if self.sock is not None:
            self.sock.sendall(b"e" if last else b"d")
            if last and self.sock.recv(1) != b"x":
                raise SystemExit("the bench's conductor went away")
"""

IO_WORKLOAD = r"""
import hashlib, http.client, json, sqlite3, sys, time

port, n, db = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
turns = Turns(sys.argv[4:])
PIECE = 50
conn = sqlite3.connect(db)
conn.execute(
    "CREATE TABLE IF NOT EXISTS hits (id INTEGER PRIMARY KEY, path TEXT, size INT, digest TEXT)"
)

def request(i):
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    client.request("GET", f"/item/{i}")
    response = client.getresponse()
    body = response.read()
    client.close()
    assert response.status == 200, response.status
    cur = conn.execute(
        "INSERT INTO hits (path, size, digest) VALUES (?, ?, ?)",
        (f"/item/{i}", len(body), hashlib.sha1(body).hexdigest()),
    )
    size = conn.execute("SELECT size FROM hits WHERE id = ?", (cur.lastrowid,)).fetchone()[0]
    if i % 10 == 9:
        conn.commit()
    return size

clock, thread_clock, process_clock = time.perf_counter_ns, time.thread_time_ns, time.process_time_ns
pieces, thread_pieces, total = [], [], 0
process = process_clock()
for first in range(0, n, PIECE):
    turns.wait()
    start, cpu = clock(), thread_clock()
    for i in range(first, min(first + PIECE, n)):
        total += request(i)
    pieces.append(clock() - start)
    thread_pieces.append(thread_clock() - cpu)
    turns.done(first + PIECE >= n)
conn.commit()
process = process_clock() - process
print(json.dumps({"loop_ns": sum(pieces), "piece_ns": pieces, "per_piece": PIECE, "bytes": total,
                  "thread_ns": sum(thread_pieces), "thread_piece_ns": thread_pieces,
                  "process_ns": process}))
"""

SERVER = r"""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BODY = bytes(range(256)) * 8  # 2 KiB

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""

THREADED_SERVER = r"""
import http.client, json, os, sqlite3, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

data, db = sys.argv[1], sys.argv[2]
upstream = int(sys.argv[3]) if len(sys.argv) > 3 else None  # a backend service's port
local = threading.local()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/quit":
            self.answer(b"bye")
            threading.Thread(target=server.shutdown).start()
            return
        item = int(self.path.rsplit("/", 1)[1])
        if not hasattr(local, "db"):  # a connection per thread, as a pool would keep
            local.db = sqlite3.connect(db)
        price = local.db.execute("SELECT price FROM items WHERE id = ?", (item % 100,)).fetchone()
        with open(os.path.join(data, f"{item % 10}.txt"), "rb") as f:
            text = f.read()
        stock = None
        if upstream is not None:  # the stock service, as a service asks another over HTTP
            conn = http.client.HTTPConnection("127.0.0.1", upstream, timeout=30)
            conn.request("GET", f"/stock/{item}")
            stock = json.loads(conn.getresponse().read())["stock"]
            conn.close()
        body = json.dumps({"item": item, "price": price[0], "at": time.time(), "stock": stock,
                           "text": text.decode()}).encode()
        self.answer(body)

    def answer(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
ready = time.process_time()
print(server.server_address[1], flush=True)
server.serve_forever()
server.server_close()
# CPU time of the whole process while it served, every thread (the recorder's own included).
print(json.dumps({"cpu_s": time.process_time() - ready}), flush=True)
"""
THREADED_REQUESTS = 1500  # a pair's load, each server's
THREADED_CLIENTS = 8  # concurrent connections, one request each, as browsers and proxies do
TARGET_THREADED = 0.05

# The backend of the I/O-bound threaded server: every request of it waits UPSTREAM_MS for
# this service (not recorded, a process of its own), as a service waits on a database or
# another service; the waiting takes no CPU, so the server is bound by I/O, not by the CPUs.
UPSTREAM = r"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

delay = float(sys.argv[1]) / 1000


class Stock(BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(delay)
        body = json.dumps({"stock": int(self.path.rsplit("/", 1)[1]) % 7}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Stock)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
"""
UPSTREAM_MS = 20.0  # a backend's answer: a database query or a call to another service
IO_BOUND_CLIENTS = 16  # concurrent clients of the I/O-bound server
IO_BOUND_REQUESTS = 1200

CPU_WORKLOAD = r"""
import json, sys, time

n = int(sys.argv[1])
turns = Turns(sys.argv[2:])

def nbody(steps):
    bodies = [
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 39.47841760435743],
        [4.84, -1.16, -0.10, 0.606, 2.81, -0.02, 0.037],
        [8.34, 4.12, -0.40, -1.01, 1.82, 0.008, 0.011],
        [12.89, -15.11, -0.22, 1.08, 0.868, -0.01, 0.0017],
        [15.37, -25.91, 0.17, 0.979, 0.594, -0.034, 0.002],
    ]
    pairs = [(a, b) for i, a in enumerate(bodies) for b in bodies[i + 1 :]]
    dt = 0.01
    for _ in range(steps):
        for a, b in pairs:
            dx, dy, dz = a[0] - b[0], a[1] - b[1], a[2] - b[2]
            mag = dt / ((dx * dx + dy * dy + dz * dz) ** 1.5)
            bm, am = b[6] * mag, a[6] * mag
            a[3] -= dx * bm; a[4] -= dy * bm; a[5] -= dz * bm
            b[3] += dx * am; b[4] += dy * am; b[5] += dz * am
        for body in bodies:
            body[0] += dt * body[3]; body[1] += dt * body[4]; body[2] += dt * body[5]
    return bodies[0][0]

def words(rounds):
    counts = {}
    for i in range(rounds):
        key = f"w{(i * 7919) % 4099}"
        counts[key] = counts.get(key, 0) + 1
        if len(counts) > 4000:
            counts = {k: v for k, v in counts.items() if v > 1}
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]

clock = time.perf_counter_ns
pieces, x = [], 0.0
for i in range(n):
    turns.wait()
    start = clock()
    x += nbody(2000)
    words(20000)
    pieces.append(clock() - start)
    turns.done(i == n - 1)
print(json.dumps({"loop_ns": sum(pieces), "piece_ns": pieces, "per_piece": 1, "x": x}))
"""

# Iterations at the large size of the calls workload (the small size is 0).
CALL_SIZES = {"time.time": 200_000, "os.urandom": 100_000, "socket": 40_000, "sqlite3": 40_000}
IO_SIZES = (200, 1000)  # requests
IO_PIECE = 50  # requests a piece (PIECE in IO_WORKLOAD)
CPU_SIZES = (0, 24)  # units of about 20 ms of pure Python

Runs = dict[int, dict[str, list[dict[str, Any]]]]  # size -> "plain"/"recorded" -> results
MODES = ("plain", "recorded")
TURN_TIMEOUT = 120.0  # seconds a lock-step run may take to start or to run one piece


@dataclass
class Child:
    proc: subprocess.Popen[bytes]
    command: list[str]
    out_dir: Path | None  # the recording, for a recorded run
    started: int  # perf_counter_ns


class Bench:
    def __init__(self, work: Path, repeats: int, lockstep_runs: int, control_runs: int) -> None:
        self.work = work
        self.repeats = repeats
        self.lockstep_runs = lockstep_runs
        self.control_runs = control_runs
        pub, key = write_keypair(work / "keys", "bench")
        self.pub, self.identity = pub, Identity.load(key)
        launcher = Path(sys.executable).with_name("sealtrace")
        self.sealtrace = (
            [str(launcher)]
            if launcher.exists()
            else [sys.executable, "-c", "from sealtrace.proxy.cli import main; main()"]
        )
        self.env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPYCACHEPREFIX=str(work / "pyc"))
        for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH"):
            self.env.pop(name, None)
        self.runs = 0

    def start(self, script: Path, args: list[str], recorded: bool) -> Child:
        self.runs += 1
        out_dir = self.work / f"rec-{self.runs}"
        command = [sys.executable, str(script), *args]
        if recorded:
            command = [*self.sealtrace, "record", "--recipient", str(self.pub)]
            command += ["--output", str(out_dir), "--", sys.executable, str(script), *args]
        proc = subprocess.Popen(
            command, env=self.env, cwd=self.work, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        return Child(proc, command, out_dir if recorded else None, time.perf_counter_ns())

    def finish(self, child: Child, count: bool) -> dict[str, Any]:
        """A child's wall time, the workload's own figures, and for a recorded run the size
        of the recording and (when count) its number of events."""
        stdout, stderr = child.proc.communicate()
        wall = time.perf_counter_ns() - child.started
        recorded = child.out_dir is not None
        if child.proc.returncode != 0 or (recorded and b"sealtrace:" in stderr):
            raise RuntimeError(
                f"{' '.join(child.command)} exited {child.proc.returncode}:\n"
                f"{stderr.decode()[-2000:]}"
            )
        result: dict[str, Any] = {"wall_ns": wall, **json.loads(stdout.splitlines()[-1])}
        if child.out_dir is not None:
            result["bytes"] = sum(p.stat().st_size for p in child.out_dir.iterdir())
            if count:
                _, parsed = load_recording(str(child.out_dir), self.identity)
                result["events"] = len(parsed.events)
            shutil.rmtree(child.out_dir)
        return result

    def run(self, script: Path, args: list[str], recorded: bool, count: bool) -> dict[str, Any]:
        """One fresh process, alone."""
        return self.finish(self.start(script, args, recorded), count)

    def lockstep(
        self, script: Path, make_args: Callable[[], list[str]], control: bool = False
    ) -> dict[str, Any]:
        """A plain and a recorded run of the same workload at the same time, taking turns
        piece by piece on one CPU (TURNS): a piece of one, then a piece of the other (which
        goes first changes every pair), each started by this conductor when the other's has
        ended. So the two pieces of a pair run a few milliseconds apart, at the same speed,
        where two whole runs one after the other are seconds apart, maybe on different vCPUs.
        Returns both runs' results by mode. With `control`, the "recorded" run is not
        recorded either: the method's negative control, whose overhead must come out 0."""
        cpu = str(max(os.sched_getaffinity(0)))
        path = self.work / f"turns-{self.runs}.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))
            listener.listen(2)
            listener.settimeout(TURN_TIMEOUT)
            children = {
                mode: self.start(
                    script, [*make_args(), str(path), mode, cpu], mode == "recorded" and not control
                )
                for mode in MODES
            }
            try:
                peers = {}
                for _ in MODES:
                    peer, _ = listener.accept()
                    peer.settimeout(TURN_TIMEOUT)
                    peers[{b"p": "plain", b"r": "recorded"}[peer.recv(1)]] = peer
                for pair in itertools.count():
                    said = []
                    for mode in MODES if pair % 2 == 0 else MODES[::-1]:
                        peers[mode].sendall(b"g")
                        said.append(peers[mode].recv(1))
                    if said == [b"e", b"e"]:
                        for peer in peers.values():
                            peer.sendall(b"x")
                        break
                    if said != [b"d", b"d"]:
                        raise RuntimeError(f"the lock-step runs said {said} at pair {pair}")
                for peer in peers.values():
                    peer.close()
                return {mode: self.finish(child, False) for mode, child in children.items()}
            finally:
                for child in children.values():
                    if child.proc.poll() is None:
                        child.proc.kill()
                        child.proc.communicate()
                path.unlink(missing_ok=True)

    def pairs(self, script: Path, sizes: dict[int, Callable[[], list[str]]]) -> Runs:
        """Every size, plain and recorded, `repeats` times, interleaved; `sizes` gives the
        workload's arguments for one run. One unmeasured run of each mode warms the caches."""
        smallest = min(sizes)
        for recorded in (False, True):
            self.run(script, sizes[smallest](), recorded, False)
        runs: Runs = {size: {"plain": [], "recorded": []} for size in sizes}
        for rep in range(self.repeats):
            for size, make_args in sizes.items():
                order = ("plain", "recorded") if rep % 2 == 0 else ("recorded", "plain")
                for mode in order:
                    recorded = mode == "recorded"
                    count = recorded and rep == 0
                    runs[size][mode].append(self.run(script, make_args(), recorded, count))
        return runs


def med(results: list[dict[str, Any]], field: str) -> float:
    return float(statistics.median(r[field] for r in results))


def unit_ns(result: dict[str, Any]) -> float:
    """ns per iteration (or request, or unit of work) of one run: its fastest piece."""
    return float(min(result["piece_ns"])) / int(result["per_piece"])


def per_unit(results: list[dict[str, Any]]) -> float:
    return float(statistics.median(unit_ns(r) for r in results))


def paired(modes: dict[str, list[dict[str, Any]]], op: Callable[[float, float], float]) -> float:
    """The median over repeats of op(recorded, plain) of the two runs of the same repeat,
    which ran one after the other: the speed of a shared virtual CPU drifts between runs."""
    return float(
        statistics.median(
            op(unit_ns(r), unit_ns(p))
            for r, p in zip(modes["recorded"], modes["plain"], strict=True)
        )
    )


def events(results: list[dict[str, Any]]) -> int:
    return int(next(r["events"] for r in results if "events" in r))


def raw(runs: Runs) -> dict[str, Any]:
    """Every run's figures, for the JSON."""
    keep = ("wall_ns", "loop_ns", "piece_ns", "thread_ns", "bytes", "events")
    return {
        str(size): {
            mode: [{k: r[k] for k in keep if k in r} for r in results]
            for mode, results in modes.items()
        }
        for size, modes in runs.items()
    }


def call_costs(bench: Bench) -> list[dict[str, Any]]:
    script = bench.work / "calls.py"
    script.write_text(CALLS_WORKLOAD)
    db = bench.work / "calls.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", ((k, f"v{k:06d}") for k in range(1000)))
    conn.close()

    def args(kind: str, n: int) -> Callable[[], list[str]]:
        return lambda: [kind, str(n), str(db)]

    rows = []
    for kind, n in CALL_SIZES.items():
        runs = bench.pairs(script, {0: args(kind, 0), n: args(kind, n)})
        small, large = runs[0], runs[n]
        ev0, evn = events(small["recorded"]), events(large["recorded"])
        per_iteration = (evn - ev0) / n
        piece = {mode: per_unit(large[mode]) for mode in ("plain", "recorded")}
        wall = {
            mode: (med(large[mode], "wall_ns") - med(small[mode], "wall_ns")) / n
            for mode in ("plain", "recorded")
        }
        size = med(large["recorded"], "bytes") - med(small["recorded"], "bytes")
        rows.append(
            {
                "call": kind,
                "iterations": n,
                "events_per_iteration": per_iteration,
                "plain_ns_per_iteration": piece["plain"],
                "recorded_ns_per_iteration": piece["recorded"],
                "overhead_ns_per_call": paired(large, lambda r, p: r - p) / per_iteration,
                "difference_plain_ns_per_iteration": wall["plain"],
                "difference_recorded_ns_per_iteration": wall["recorded"],
                "difference_overhead_ns_per_call": (wall["recorded"] - wall["plain"])
                / per_iteration,
                "bytes_per_event": size / (evn - ev0),
                "empty_recording_bytes": med(small["recorded"], "bytes"),
                "startup_ms": (med(small["recorded"], "wall_ns") - med(small["plain"], "wall_ns"))
                / 1e6,
                "runs": raw(runs),
            }
        )
    return rows


def overheads(runs: Runs, small: int, large: int) -> dict[str, Any]:
    """Whole-process, in-process and difference overheads between two sizes."""

    def wall(size: int, mode: str) -> float:
        return med(runs[size][mode], "wall_ns")

    diff = {m: wall(large, m) - wall(small, m) for m in ("plain", "recorded")}
    unit = {m: per_unit(runs[large][m]) for m in ("plain", "recorded")}
    return {
        "sizes": [small, large],
        "plain_ms": wall(large, "plain") / 1e6,
        "recorded_ms": wall(large, "recorded") / 1e6,
        "whole_process_overhead": wall(large, "recorded") / wall(large, "plain") - 1,
        "plain_us_per_unit": unit["plain"] / 1e3,
        "recorded_us_per_unit": unit["recorded"] / 1e3,
        "in_process_overhead": paired(runs[large], lambda r, p: r / p) - 1,
        "in_process_added_us_per_unit": paired(runs[large], lambda r, p: r - p) / 1e3,
        "difference_overhead": diff["recorded"] / diff["plain"] - 1,
        "small_size_added_ms": (wall(small, "recorded") - wall(small, "plain")) / 1e6,
        "runs": raw(runs),
    }


BOOTSTRAP_SAMPLES = 4000
SKIPPED_PAIRS = 2  # of each lock-step run: start-up, leaving an even number of pairs


def bootstrap_interval(runs: list[tuple[float, float]], level: float = 0.95) -> tuple[float, float]:
    """The `level` interval of the overhead sum(recorded) / sum(plain) - 1, by resampling
    whole runs, given as (recorded, plain) totals (a percentile bootstrap, seeded so the
    same runs give the same interval). Runs, not pieces, are resampled: pieces of one pair
    of processes are alike, and it is between pairs of processes that the figure moves."""
    draw = random.Random(0)
    figures = []
    for _ in range(BOOTSTRAP_SAMPLES):
        sample = [runs[draw.randrange(len(runs))] for _ in runs]
        figures.append(sum(r for r, _ in sample) / sum(p for _, p in sample) - 1)
    figures.sort()
    tail = (1 - level) / 2
    return figures[int(tail * len(figures))], figures[int((1 - tail) * len(figures)) - 1]


def target_verdict(
    interval: tuple[float, float], target: float, control: tuple[float, float] | None = None
) -> str:
    """met: the whole interval is within the target; NOT met: the whole of it is above. Never
    settled when the control's interval (two plain runs) does not hold 0."""
    if control is not None and not control[0] <= 0 <= control[1]:
        return "not settled (control failed)"
    low, high = interval
    return "met" if high <= target else "NOT met" if low > target else "not settled"


def lockstep_figures(runs: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Figures of lock-step runs (Bench.lockstep), over every pair of pieces but each run's
    first SKIPPED_PAIRS (start-up: first connections, cold caches; see the module's doc).
    The overhead is the recorded pieces' total time against the plain pieces' total, so the
    recorder's periodic work (sealing every 64 KiB) counts in full; its 95 % interval
    resamples whole runs. The median over pairs and each run's own figure are given too, to
    show the spread."""
    unit = int(runs[0]["plain"]["per_piece"])

    def pieces(run: dict[str, dict[str, Any]], field: str) -> list[tuple[int, int]]:
        pairs = list(zip(run["recorded"][field], run["plain"][field], strict=True))
        if len(pairs) <= SKIPPED_PAIRS or (len(pairs) - SKIPPED_PAIRS) % 2:
            raise ValueError(f"{len(pairs)} pairs: one run would go first more often")
        return pairs[SKIPPED_PAIRS:]

    per_run = [pieces(run, "piece_ns") for run in runs]
    pairs = [pair for run_pairs in per_run for pair in run_pairs]
    recorded, plain = sum(r for r, _ in pairs), sum(p for _, p in pairs)
    totals = [(sum(r for r, _ in ps), sum(p for _, p in ps)) for ps in per_run]
    figures: dict[str, Any] = {
        "runs": len(runs),
        "pairs": len(pairs),
        "plain_us_per_unit": plain / len(pairs) / unit / 1e3,
        "recorded_us_per_unit": recorded / len(pairs) / unit / 1e3,
        "overhead": recorded / plain - 1,
        "interval_95": list(bootstrap_interval(totals)),
        "added_us_per_unit": (recorded - plain) / len(pairs) / unit / 1e3,
        "median_pair_overhead": statistics.median(r / p for r, p in pairs) - 1,
        "run_overheads": [r / p - 1 for r, p in totals],
    }
    if "thread_piece_ns" in runs[0]["plain"]:
        cpu = [pair for run in runs for pair in pieces(run, "thread_piece_ns")]
        units = len(cpu) * unit
        figures["thread_cpu_plain_us_per_unit"] = sum(p for _, p in cpu) / units / 1e3
        figures["thread_cpu_added_us_per_unit"] = sum(r - p for r, p in cpu) / units / 1e3

        def other_threads(result: dict[str, Any]) -> float:
            return float(result["process_ns"] - result["thread_ns"])

        all_units = sum(len(run["plain"]["piece_ns"]) for run in runs) * unit
        figures["other_threads_cpu_added_us_per_unit"] = (
            sum(other_threads(run["recorded"]) - other_threads(run["plain"]) for run in runs)
            / all_units
            / 1e3
        )
    return figures


def io_workload(bench: Bench) -> dict[str, Any]:
    server_script = bench.work / "server.py"
    server_script.write_text(SERVER)
    script = bench.work / "io.py"
    script.write_text(TURNS + IO_WORKLOAD)
    dbs = bench.work / "io-dbs"
    dbs.mkdir()
    fresh = iter(range(1_000_000))  # a new database file for every run, so runs do equal work
    server = subprocess.Popen(
        [sys.executable, str(server_script)], stdout=subprocess.PIPE, env=bench.env
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().decode().strip()

        def args(n: int) -> Callable[[], list[str]]:
            return lambda: [port, str(n), str(dbs / f"{next(fresh)}.db")]

        runs = bench.pairs(script, {n: args(n) for n in IO_SIZES})
        lockstep = [bench.lockstep(script, args(IO_SIZES[1])) for _ in range(bench.lockstep_runs)]
        control = [
            bench.lockstep(script, args(IO_SIZES[1]), control=True)
            for _ in range(bench.control_runs)
        ]
    finally:
        server.terminate()
        server.wait()
    small, large = IO_SIZES
    ev0, evn = events(runs[small]["recorded"]), events(runs[large]["recorded"])
    size = med(runs[large]["recorded"], "bytes") - med(runs[small]["recorded"], "bytes")

    def thread_us(result: dict[str, Any]) -> float:
        return float(result["thread_ns"]) / large / 1e3

    return overheads(runs, small, large) | {
        # CPU time of the application's thread in the loop, a request: what recording adds
        # without the waiting, paired like the in-process figures.
        "thread_cpu_plain_us_per_unit": statistics.median(map(thread_us, runs[large]["plain"])),
        "thread_cpu_added_us_per_unit": statistics.median(
            thread_us(r) - thread_us(p)
            for r, p in zip(runs[large]["recorded"], runs[large]["plain"], strict=True)
        ),
        "events_per_request": (evn - ev0) / (large - small),
        "bytes_per_event": size / (evn - ev0),
        "recording_bytes": med(runs[large]["recorded"], "bytes"),
        "lockstep": lockstep_figures(lockstep),
        "control": lockstep_figures(control) if control else None,
    }


def cpu_workload(bench: Bench) -> dict[str, Any]:
    script = bench.work / "cpu.py"
    script.write_text(TURNS + CPU_WORKLOAD)

    def args(n: int) -> Callable[[], list[str]]:
        return lambda: [str(n)]

    runs = bench.pairs(script, {n: args(n) for n in CPU_SIZES})
    lockstep = [bench.lockstep(script, args(CPU_SIZES[1])) for _ in range(bench.lockstep_runs)]
    return overheads(runs, *CPU_SIZES) | {"lockstep": lockstep_figures(lockstep)}


def threaded_workload(
    bench: Bench, pairs: int, control_pairs: int, *, upstream_ms: float | None = None
) -> dict[str, Any]:
    """Throughput of a threaded HTTP server (ThreadingHTTPServer: a thread per connection,
    each request a sqlite3 SELECT, a file read and a clock read) under concurrent clients of
    this process, plain and recorded. Each pair serves the same load from a plain and a
    recorded server, side by side for the I/O-bound one (serve()), one after the other
    otherwise, which goes first changing every pair; the overhead is the recorded servers'
    total time against the plain ones', with a 95 % interval over pairs, and its control
    pairs (neither server recorded) must hold 0.

    With `upstream_ms`, the I/O-bound server: each request also asks a backend (UPSTREAM, a
    process of its own, not recorded) that answers in that many milliseconds, under
    IO_BOUND_CLIENTS clients; without, THREADED_CLIENTS clients keep the server's CPU busy
    (the CPUs, shared with the clients, limit it)."""
    clients, requests = THREADED_CLIENTS, THREADED_REQUESTS
    if upstream_ms is not None:
        clients, requests = IO_BOUND_CLIENTS, IO_BOUND_REQUESTS
    script = bench.work / "threaded_server.py"
    script.write_text(THREADED_SERVER)
    data = bench.work / "threaded-data"
    data.mkdir(exist_ok=True)
    for i in range(10):
        (data / f"{i}.txt").write_text(f"item text {i} " * 20)
    db = bench.work / "threaded.db"
    db.unlink(missing_ok=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, price REAL)")
        conn.executemany("INSERT INTO items VALUES (?, ?)", [(i, i * 1.25) for i in range(100)])
    conn.close()

    backend = None
    server_args = [str(data), str(db)]
    if upstream_ms is not None:
        upstream_script = bench.work / "upstream.py"
        upstream_script.write_text(UPSTREAM)
        backend = subprocess.Popen(
            [sys.executable, str(upstream_script), str(upstream_ms)],
            stdout=subprocess.PIPE,
            env=bench.env,
        )
        assert backend.stdout is not None
        server_args.append(backend.stdout.readline().decode().strip())

    def serve(servers: dict[str, bool]) -> dict[str, tuple[float, float]]:
        """Serves the load from one server per mode ({mode: recorded?}) and gives each
        mode's (time, the server's CPU seconds). One server: its time is the load's wall
        time. Two at once (side by side): every client sends each of its requests to both,
        which goes first alternating from one request to the next, and a server's time is
        what the clients waited on it (its requests' latencies over the number of clients);
        both meet the same moments of the machine."""
        children = {mode: bench.start(script, server_args, rec) for mode, rec in servers.items()}
        ports = {}
        for mode, child in children.items():
            assert child.proc.stdout is not None
            ports[mode] = int(child.proc.stdout.readline())
        modes = list(servers)
        waited = dict.fromkeys(modes, 0.0)
        failed: list[BaseException] = []

        def client(first: int) -> None:
            spent = dict.fromkeys(modes, 0.0)
            try:
                for n, i in enumerate(range(first, requests, clients)):
                    for mode in modes if (n + first) % 2 == 0 else modes[::-1]:
                        began = time.perf_counter()
                        conn = http.client.HTTPConnection("127.0.0.1", ports[mode], timeout=30)
                        conn.request("GET", f"/item/{i}")
                        reply = conn.getresponse()
                        reply.read()
                        conn.close()
                        spent[mode] += time.perf_counter() - began
                        if reply.status != 200:
                            raise RuntimeError(f"status {reply.status}")
            except BaseException as exc:
                failed.append(exc)
            with lock:
                for mode in modes:
                    waited[mode] += spent[mode]

        lock = threading.Lock()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        began = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - began
        out = {}
        for mode, child in children.items():
            quit_ = http.client.HTTPConnection("127.0.0.1", ports[mode], timeout=30)
            quit_.request("GET", "/quit")
            quit_.getresponse().read()
            quit_.close()
            result = bench.finish(child, False)
            spent = took if len(modes) == 1 else waited[mode] / clients
            out[mode] = (spent, float(result["cpu_s"]))
        if failed:
            raise RuntimeError(f"a client failed: {failed[0]!r}")
        return out

    def run_pairs(n: int, control: bool) -> list[dict[str, tuple[float, float]]]:
        out = []
        for pair in range(n):
            order = MODES if pair % 2 == 0 else MODES[::-1]
            recorded = {mode: mode == "recorded" and not control for mode in order}
            if side_by_side:
                took = serve(recorded)
            else:
                took = {mode: serve({mode: rec})[mode] for mode, rec in recorded.items()}
            out.append(
                {
                    "wall": (took["recorded"][0], took["plain"][0]),
                    "cpu": (took["recorded"][1], took["plain"][1]),
                }
            )
        return out

    # Side by side where the server waits on I/O; one after the other where the CPUs are
    # what limits it (two CPU-bound servers at once would share the CPUs, each slowing the
    # other by its own cost: the pair's figures would not be what one server loses).
    side_by_side = upstream_ms is not None
    try:
        serve({"plain": False, "recorded": True})  # warm the caches: it does not count
        measured = run_pairs(pairs, control=False)
        controls = run_pairs(control_pairs, control=True)
    finally:
        if backend is not None:
            backend.terminate()
            backend.wait()

    def figures(pairs_: list[dict[str, tuple[float, float]]]) -> dict[str, Any]:
        runs, cpu = [p["wall"] for p in pairs_], [p["cpu"] for p in pairs_]
        recorded, plain = sum(r for r, _ in runs), sum(p for _, p in runs)
        cpu_recorded, cpu_plain = sum(r for r, _ in cpu), sum(p for _, p in cpu)
        return {
            "pairs": len(runs),
            "plain_requests_per_s": requests * len(runs) / plain,
            "recorded_requests_per_s": requests * len(runs) / recorded,
            "overhead": recorded / plain - 1,
            "interval_95": list(bootstrap_interval(runs)),
            "pair_overheads": [r / p - 1 for r, p in runs],
            # The server's CPU time a request: what a server the clients saturate would
            # lose in throughput (these clients, in one Python process, may not saturate it).
            "plain_server_cpu_us_per_request": cpu_plain / requests / len(cpu) * 1e6,
            "recorded_server_cpu_us_per_request": cpu_recorded / requests / len(cpu) * 1e6,
            "server_cpu_overhead": cpu_recorded / cpu_plain - 1,
            "server_cpu_interval_95": list(bootstrap_interval(cpu)),
        }

    return {
        "requests": requests,
        "clients": clients,
        "upstream_ms": upstream_ms,
        "side_by_side": side_by_side,
        **figures(measured),
        "control": figures(controls) if controls else None,
    }


def cpu_ticks() -> tuple[int, int]:
    """(all, stolen) CPU ticks so far, from /proc/stat; (0, 0) where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def threaded_servers(bench: Bench, pairs: int) -> dict[str, dict[str, Any]]:
    """Both threaded servers: the I/O-bound one (the target's, under `threaded_server`) and
    the one its clients keep CPU-bound (`threaded_server_cpu_bound`, given beside it)."""
    controls = max(pairs // 2, 1)
    return {
        "threaded_server": threaded_workload(bench, pairs, controls, upstream_ms=UPSTREAM_MS),
        "threaded_server_cpu_bound": threaded_workload(bench, pairs, controls),
    }


def threaded_only(path: Path, pairs: int) -> None:
    """The threaded servers alone, their figures (with the machine, load and time they were
    taken at) put in place of the ones in an existing results file."""
    began, load_before = time.perf_counter(), load()
    with tempfile.TemporaryDirectory(prefix="sealtrace-bench-") as tmp:
        bench = Bench(Path(tmp), 1, 0, 0)
        servers = threaded_servers(bench, pairs)
    taken = {
        "machine": machine(),
        "seconds": time.perf_counter() - began,
        "load_average": {"before": load_before, "after": load()},
    }
    print_threaded(servers)
    doc = json.loads(path.read_text()) if path.exists() else {"bench": "record_overhead"}
    doc.setdefault("targets", {})["threaded_server_overhead"] = TARGET_THREADED
    doc.update({name: figures | taken for name, figures in servers.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {path}")


def print_threaded(servers: dict[str, dict[str, Any]]) -> None:
    for name, t in servers.items():
        tc = t["control"]
        holds = "holds" if tc["interval_95"][0] <= 0 <= tc["interval_95"][1] else "does NOT hold"
        target = name == "threaded_server"  # the I/O-bound one: the target
        what = (
            f"threaded, I/O-bound (a {t['upstream_ms']:.0f} ms backend call a request)"
            if target
            else "threaded, CPU-bound (no backend: the clients keep the CPUs busy)"
        )
        print(what)
        verdict_ = (
            f" | <= {TARGET_THREADED:.0%} "
            + target_verdict(tuple(t["interval_95"]), TARGET_THREADED, tuple(tc["interval_95"]))
            if target
            else " | (reported, not the target)"
        )
        print(
            f"{'  throughput':<18} | {t['plain_requests_per_s']:>6.0f}/s plain,"
            f" {t['recorded_requests_per_s']:.0f}/s recorded ({t['requests']} requests,"
            f" {t['clients']} clients, {t['pairs']} pairs): {t['overhead']:.1%},"
            f" 95 % interval {t['interval_95'][0]:.1%} .. {t['interval_95'][1]:.1%}" + verdict_
        )
        print(
            f"{'  server CPU':<18} | {t['plain_server_cpu_us_per_request']:.0f} us a request"
            f" plain, {t['recorded_server_cpu_us_per_request']:.0f} us recorded:"
            f" {t['server_cpu_overhead']:.1%}, 95 % interval"
            f" {t['server_cpu_interval_95'][0]:.1%} .. {t['server_cpu_interval_95'][1]:.1%}"
            " (what a saturated server would lose)"
        )
        print(
            f"{'  control':<18} | both plain: {tc['overhead']:.1%}, 95 % interval"
            f" {tc['interval_95'][0]:.1%} .. {tc['interval_95'][1]:.1%} ({tc['pairs']} pairs):"
            f" the interval {holds} 0"
        )


def main() -> None:
    global CALL_SIZES, IO_SIZES, CPU_SIZES
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--lockstep", type=int, default=20, help="lock-step runs of each workload (targets)"
    )
    parser.add_argument(
        "--control", type=int, default=10, help="lock-step runs of the I/O workload unrecorded"
    )
    parser.add_argument(
        "--threaded",
        type=int,
        default=10,
        help="pairs of threaded servers (and half as many control pairs)",
    )
    parser.add_argument(
        "--threaded-only",
        action="store_true",
        help="only the threaded servers; their figures replace the ones in the JSON",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 repeats (smoke test)")
    parser.add_argument(
        "--json", type=Path, default=Path(__file__).parent / "results" / "record_overhead.json"
    )
    args = parser.parse_args()
    if args.quick:
        CALL_SIZES = {k: v // 10 for k, v in CALL_SIZES.items()}
        IO_SIZES, CPU_SIZES = (50, 200), (0, 4)  # 4 pieces each: 2 pairs counted
        args.repeats = min(args.repeats, 3)
        args.lockstep, args.control = min(args.lockstep, 3), min(args.control, 2)
        args.threaded = min(args.threaded, 2)

    if args.threaded_only:
        threaded_only(args.json, args.threaded)
        return
    began, load_before, ticks_before = time.perf_counter(), load(), cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="sealtrace-bench-") as tmp:
        bench = Bench(Path(tmp), args.repeats, args.lockstep, args.control)
        calls = call_costs(bench)
        io = io_workload(bench)
        cpu = cpu_workload(bench)
        threaded = threaded_servers(bench, args.threaded)
    elapsed, load_after, ticks_after = time.perf_counter() - began, load(), cpu_ticks()
    ticks = ticks_after[0] - ticks_before[0]
    stolen = (ticks_after[1] - ticks_before[1]) / ticks if ticks else 0.0
    startup = statistics.median([r["startup_ms"] for r in calls] + [cpu["small_size_added_ms"]])
    empty = statistics.median(r["empty_recording_bytes"] for r in calls)

    print(f"Per intercepted call (median of {args.repeats} runs each; overhead = recorded - plain)")
    print(
        "call       | events/iter | plain ns/iter | recorded ns/iter | overhead ns/call"
        " | by difference | bytes/event | <= 2 us"
    )
    for r in calls:
        print(
            f"{r['call']:<10} | {r['events_per_iteration']:>11.2f}"
            f" | {r['plain_ns_per_iteration']:>13.0f} | {r['recorded_ns_per_iteration']:>16.0f}"
            f" | {r['overhead_ns_per_call']:>16.0f} | {r['difference_overhead_ns_per_call']:>13.0f}"
            f" | {r['bytes_per_event']:>11.1f}"
            f" | {verdict(r['overhead_ns_per_call'] <= TARGET_CALL_NS)}"
        )
    print()
    print(
        "workload           | plain ms | recorded ms | whole process | by difference"
        " | lock-step | 95 % interval   | median pair | runs from .. to | target"
    )
    control = io["control"]
    io_control = tuple(control["interval_95"]) if control is not None else None
    for name, w, target, against in (
        (f"I/O, {IO_SIZES[1]} requests", io, TARGET_IO, io_control),
        ("pure Python", cpu, TARGET_CPU, None),
    ):
        step = w["lockstep"]
        print(
            f"{name:<18} | {w['plain_ms']:>8.0f} | {w['recorded_ms']:>11.0f}"
            f" | {w['whole_process_overhead']:>13.1%} | {w['difference_overhead']:>13.1%}"
            f" | {step['overhead']:>9.1%}"
            f" | {step['interval_95'][0]:>6.1%} .. {step['interval_95'][1]:<6.1%}"
            f" | {step['median_pair_overhead']:>11.1%}"
            f" | {min(step['run_overheads']):>6.1%} .. {max(step['run_overheads']):.1%}"
            f" | <= {target:.0%} {target_verdict(step['interval_95'], target, against)}"
        )
    if control is not None:
        low, high = control["interval_95"]
        print(
            f"{'control: I/O, both plain':<18} | lock-step {control['overhead']:.1%},"
            f" 95 % interval {low:.1%} .. {high:.1%} ({control['runs']} runs): the interval"
            f" {'holds' if low <= 0 <= high else 'does NOT hold'} 0"
        )
    print_threaded(threaded)
    step = io["lockstep"]
    print(
        f"\nI/O, lock-step ({step['runs']} runs, {step['pairs']} pairs of {IO_PIECE} requests):"
        f" recording adds {step['added_us_per_unit']:.1f} us a request"
        f" ({step['plain_us_per_unit']:.0f} us plain); CPU time on the application's thread"
        f" {step['thread_cpu_added_us_per_unit']:.1f} us more"
        f" ({step['thread_cpu_plain_us_per_unit']:.0f} us plain), on the recorder's own thread"
        f" {step['other_threads_cpu_added_us_per_unit']:.1f} us."
        f" {io['events_per_request']:.1f} events and"
        f" {io['events_per_request'] * io['bytes_per_event']:.0f} recorded bytes per request"
        f" ({io['bytes_per_event']:.0f} per event)."
        f" Recorder startup (recorded - plain wall time of an empty run): {startup:.0f} ms;"
        f" an empty recording is {empty / 1024:.0f} KiB."
        f" Took {elapsed:.0f} s; load average {load_before:.2f} before, {load_after:.2f} after;"
        f" {stolen:.1%} of CPU time stolen by the hypervisor."
    )

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "bench": "record_overhead",
                "targets": {
                    "overhead_ns_per_call": TARGET_CALL_NS,
                    "io_overhead": TARGET_IO,
                    "cpu_overhead": TARGET_CPU,
                    "threaded_server_overhead": TARGET_THREADED,
                },
                "repeats": args.repeats,
                "lockstep_runs": args.lockstep,
                "control_runs": args.control,
                "machine": machine(),
                "load_average": {"before": load_before, "after": load_after},
                "cpu_stolen": stolen,
                "seconds": elapsed,
                "startup_ms": startup,
                "empty_recording_bytes": empty,
                "calls": calls,
                "io": io,
                "cpu": cpu,
                **threaded,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
