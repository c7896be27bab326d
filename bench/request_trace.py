"""How long a question about one request of a long-lived worker takes, against the same
question in a short-lived one (issue 23: tracing a value in request 1,900 of a worker that
served 2,000 should take no longer than in a worker that served 10).

    .venv/bin/python bench/request_trace.py [--quick]

Records the same small HTTP service twice with `sealtrace record`: once serving 10 requests,
once 2,000 (one client, one request after another; each request prices an order from its
JSON body). Then, median of 3 (1 with --quick), times `sealtrace trace --in-process --at
request:N --var b` (the response body at the call that sent it, traced to its origins): N = 10
in the short worker, N = 1,900 in the long one, each a fresh command (decrypt, survey, answer),
as a user asks it. It also times a plain replay of each recording (no engine), the floor a
windowed question (fast-forward without the engine, trace inside the request) could reach.

A session (the sandbox's way, and the console's) asks many questions of one replay: it is
opened once (one pass under the engine, taking checkpoints), then each question at request:N
starts from a checkpoint at or before that request's connection. For that way it times the
opening, the first question and a further one, in one process (the runner's Inquiry, with
the runner's checkpoint policy).

Prints a table and writes bench/results/request_trace.json with the machine.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "request_trace.json"
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))

SERVICE = """
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Prices(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        order = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        subtotal = sum(item["price"] * item["qty"] for item in order["items"])
        total = round(subtotal * (1 - order.get("discount", 0) / 100), 2)
        body = json.dumps({"total": total}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Prices)
print(server.server_address[1], flush=True)
for _ in range(int(sys.argv[1])):
    server.handle_request()
"""


def record(work: Path, requests: int) -> Path:
    keys = work / "keys"
    if not keys.exists():
        subprocess.run([SEALTRACE, "keygen", "--out", str(keys), "--name", "bench"], check=True,
                       capture_output=True)  # fmt: skip
    app = work / "app" / "service.py"
    app.parent.mkdir(exist_ok=True)
    app.write_text(SERVICE)
    store = work / f"rec-{requests}"
    recorder = subprocess.Popen(
        [SEALTRACE, "record", "--recipient", str(keys / "bench.pub"), "--output", str(store),
         "--", sys.executable, str(app), str(requests)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert recorder.stdout is not None
    port = int(recorder.stdout.readline())
    for i in range(requests):
        body = json.dumps({"items": [{"price": 9.99, "qty": 1 + i % 5}], "discount": i % 3})
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(
                f"POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"Connection: close\r\n\r\n{body}".encode()
            )
            while conn.recv(65536):
                pass
    _out, err = recorder.communicate(timeout=600)
    if recorder.returncode != 0:
        raise SystemExit(f"recording {requests} requests failed: {err.decode()}")
    return store


def timed(argv: list[str]) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, timeout=3600, check=False)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])} failed: {proc.stderr.decode()}")
    return seconds, json.loads(proc.stdout)


def measure(work: Path, store: Path, number: int, rounds: int) -> dict[str, Any]:
    """Each way of asking, median of `rounds`: windowed (the default for request:N), windowed
    with checkpoints (the fast-forward runs once; later passes fork from the window), and the
    whole run traced (--whole-run), beside a plain replay."""
    key = str(work / "keys" / "bench.key")
    trace = [SEALTRACE, "trace", str(store), "--identity", key, "--in-process",
             "--at", f"request:{number}", "--var", "b", "--json"]  # fmt: skip
    ways = {
        "windowed": trace,
        "windowed_checkpoints": [*trace, "--checkpoint-every", "20000"],
        "whole_run": [*trace, "--whole-run"],
        "plain_replay": [
            SEALTRACE,
            "replay",
            str(store),
            "--identity",
            key,
            "--in-process",
            "--json",
        ],
    }
    row: dict[str, Any] = {"request": number}
    for name, argv in ways.items():
        runs, answer = [], {}
        for _ in range(rounds):
            seconds, answer = timed(argv)
            runs.append(seconds)
        row[f"{name}_s"] = round(statistics.median(runs), 3)
        if name != "plain_replay":
            row[f"{name}_answer"] = answer["root"]["value"]["repr"]
            row[f"{name}_steps_to_stop"] = answer["query"]["stopped_at"]["counter"]
    return row


def session(store: str, key: str, number: int) -> None:
    """(In a child process.) A session's timings: open, first question, a further one."""
    from sealtrace.proxy.format import Identity
    from sealtrace.sandbox import CheckpointPolicy, Inquiry, load_recording
    from sealtrace.sandbox.questions import Trace

    data, parsed = load_recording(store, Identity.load(Path(key)))
    question = Trace(at=f"request:{number}", var="b", depth=64)
    timings: dict[str, Any] = {}
    started = time.perf_counter()
    with Inquiry(data, parsed, timeout=3600, checkpoints=CheckpointPolicy(250_000, 64)) as asked:
        asked.survey()
        timings["open_s"] = time.perf_counter() - started
        for name in ("first_question_s", "further_question_s"):
            started = time.perf_counter()
            answer = asked.trace(question)
            timings[name] = time.perf_counter() - started
        timings["answer"] = answer["root"]["value"]["repr"]
        timings["window"] = answer["query"].get("window")
    print(json.dumps(timings))


def measure_session(work: Path, store: Path, number: int, rounds: int) -> dict[str, Any]:
    key = str(work / "keys" / "bench.key")
    argv = [sys.executable, __file__, "--session", str(store), key, str(number)]
    runs = [timed(argv)[1] for _ in range(rounds)]
    row: dict[str, Any] = {
        name: round(statistics.median(r[name] for r in runs), 3)
        for name in ("open_s", "first_question_s", "further_question_s")
    }
    row["answer"], row["window"] = runs[0]["answer"], runs[0]["window"]
    return row


def main() -> None:
    if sys.argv[1:2] == ["--session"]:
        session(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    quick = "--quick" in sys.argv
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="sealtrace-bench-") as tmp:
        work = Path(tmp)
        load_before = os.getloadavg()[0]
        short_store, long_store = record(work, 10), record(work, 2000)
        short = measure(work, short_store, 10, rounds)
        long = measure(work, long_store, 1900, rounds)
        sessions = {
            "worker_10": measure_session(work, short_store, 10, rounds),
            "worker_2000": measure_session(work, long_store, 1900, rounds),
        }
        load_after = os.getloadavg()[0]
    # The target compares the same question asked the same way of both workers; the best
    # way for the long worker is set against the short worker asked that way too.
    ratios = {
        way: round(long[f"{way}_s"] / short[f"{way}_s"], 2)
        for way in ("windowed", "windowed_checkpoints", "whole_run")
    }
    for way in ("first_question", "further_question"):
        ratios[f"session_{way}"] = round(
            sessions["worker_2000"][f"{way}_s"] / sessions["worker_10"][f"{way}_s"], 2
        )
    doc = {
        "machine": machine(),
        "session": sessions,
        "load": [round(load_before, 2), round(load_after, 2)],
        "rounds": rounds,
        "worker_10": short,
        "worker_2000": long,
        "ratios": ratios,
        "target": "request 1,900 of 2,000 no slower than request 10 of 10 (ratio <= 1)",
        "met": {way: r <= 1.0 for way, r in ratios.items()},
    }
    RESULTS.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    ways = ("windowed", "windowed_checkpoints", "whole_run", "plain_replay")
    print(f"{'worker':<16}{'request':>8}" + "".join(f"{w:>22}" for w in ways))
    for name, row in (("10 requests", short), ("2,000 requests", long)):
        cells = "".join(f"{row[f'{w}_s']:>21}s" for w in ways)
        print(f"{name:<16}{row['request']:>8}{cells}")
    print(f"{'session':<16}{'request':>8}{'open':>22}{'first question':>22}{'further':>22}")
    for name, number in (("worker_10", 10), ("worker_2000", 1900)):
        row = sessions[name]
        cells = "".join(
            f"{row[k]:>21}s" for k in ("open_s", "first_question_s", "further_question_s")
        )
        print(f"{name:<16}{number:>8}{cells}")
    print("ratio (2,000 / 10): " + ", ".join(f"{w} {r}" for w, r in ratios.items()))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
