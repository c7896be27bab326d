"""What recording costs the application's thread, in instructions: steady, where time is not.

On a shared virtual machine the CPU's speed drifts from one second to the next, so the time
figures of bench/record_overhead.py move by tens of percent between runs. Instruction counts
do not. This script runs the I/O-bound workload of bench/record_overhead.py (HTTP GETs to a
local server, a new connection each, plus an INSERT and a SELECT in a sqlite3 file) under
valgrind's callgrind, in fresh processes, for:

- **plain**: not recorded;
- **python**: recorded, with the recorder's per-call path in Python (SEALTRACE_RECORDER=python);
- **native**: recorded, with the per-call path in C (sealtrace.proxy._fastpath), as shipped.

The recorder is started in-process (the embedding API, `start_recording`), so the process
callgrind measures is the application itself. A figure is the instructions executed on the
application's thread inside a loop of N requests, after WARM_UP requests, divided by N:
callgrind counts only while the loop's `functools.reduce` runs (--toggle-collect), so
start-up, imports and the end of the recording stay out of it. (Counting whole runs, N
requests less 0, moved the figure by several thousand between runs that differed only in
their temporary directory's name.) Even so, the same loop in another process can differ
by a few thousand a request, so the figure is the median of LOOP_RUNS processes. The
recorder's background thread (hashing, sealing, storing) is counted apart, over whole runs:
(N requests - 0 requests) / N. A second table counts single operations (a socket made and
closed, a sqlite3 INSERT ...), plain and recorded with the C path, to show where a
request's added instructions go. Needs valgrind.

    python bench/record_instructions.py [--requests N] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# The recorder started in-process, then bench/record_overhead.py's I/O workload as it is, with
# no requests of its own: LOOP makes them.
PROLOGUE = r"""
import os, sys
mode, requests, port, work = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if mode != "plain":
    os.environ["SEALTRACE_RECORDER"] = mode
    from pathlib import Path
    from sealtrace.proxy import start_recording, write_keypair
    pub, _ = write_keypair(Path(work) / "keys", "bench")
    if start_recording(str(pub), os.path.join(work, "recording"), app_roots=[work]) is None:
        raise SystemExit("the recorder did not start")
sys.argv = [sys.argv[0], port, "0", os.path.join(work, "hits.db")]
"""

# The requests: WARM_UP first (first connections, first statements), then the counted loop,
# the only place where the application's thread calls functools.reduce.
WARM_UP = 20
LOOP = rf"""
import functools
for i in range({WARM_UP}):
    request(i)
functools.reduce(lambda _, i: request(i), range({WARM_UP}, {WARM_UP} + requests), None)
"""
COUNTED = ("--collect-atstart=no", "--toggle-collect=functools_reduce")
# Fresh processes whose loops are counted, the median taken: the same loop in another
# process, whose objects lie at other addresses, has differed by up to 1 % (4k a request).
LOOP_RUNS = 3

MODES = ("plain", "python", "native")


sys.path.insert(0, str(Path(__file__).parent))
from record_overhead import IO_WORKLOAD, SERVER, TURNS  # noqa: E402


def _server(work: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    script = work / "server.py"
    script.write_text(SERVER)
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
    assert server.stdout is not None
    return server, server.stdout.readline().decode().strip()


def _instructions(out: Path) -> dict[str, int]:
    """Instructions per thread from callgrind's output files (out-01 is the main thread)."""
    counts = {}
    for part in sorted(out.parent.glob(out.name + "-*")):
        match = re.search(r"^summary: (\d+)", part.read_text(errors="replace"), re.MULTILINE)
        if match:
            counts[part.name.rsplit("-", 1)[1]] = int(match.group(1))
    return counts


def _callgrind(
    script: Path, args: list[str], run: Path, env: dict[str, str], options: tuple[str, ...] = ()
) -> dict[str, int]:
    run.mkdir()
    out = run / "callgrind.out"
    command = ["valgrind", "--tool=callgrind", "--separate-threads=yes", *options]
    command += [f"--callgrind-out-file={out}", sys.executable, str(script), *args]
    proc = subprocess.run(command, env=env, capture_output=True, cwd=run)
    if proc.returncode != 0:
        raise RuntimeError(f"{args}: exit {proc.returncode}\n{proc.stderr.decode()[-2000:]}")
    return _instructions(out)


def measure(mode: str, requests: int, port: str, work: Path, env: dict[str, str]) -> dict[str, Any]:
    script = work / "workload.py"
    script.write_text(PROLOGUE + TURNS + IO_WORKLOAD + LOOP)
    loops = []
    for index in range(LOOP_RUNS):
        run = work / f"{mode}-loop-{index}"
        loops.append(_callgrind(script, [mode, str(requests), port, str(run)], run, env, COUNTED))
    main = statistics.median(loop["01"] for loop in loops) / requests
    runs = {}
    for n in (0, requests):
        run = work / f"{mode}-{n}"
        runs[n] = _callgrind(script, [mode, str(n), port, str(run)], run, env)
    others = sum(v for k, v in runs[requests].items() if k != "01")
    others -= sum(v for k, v in runs[0].items() if k != "01")
    return {"app_thread_per_request": main, "other_threads_per_request": others / requests}


# One operation at a time, each repeated, on the application's thread: where the added
# instructions of a request go. The peer of the socket operations is a bare _socket.socket,
# which the recorder does not replace, so only the application's side is recorded.
OPERATIONS_PROLOGUE = r"""
import os, sys
mode, operation, n, work = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if mode != "plain":
    os.environ["SEALTRACE_RECORDER"] = mode
    from pathlib import Path
    from sealtrace.proxy import start_recording, write_keypair
    pub, _ = write_keypair(Path(work) / "keys", "bench")
    if start_recording(str(pub), os.path.join(work, "recording"), app_roots=[work]) is None:
        raise SystemExit("the recorder did not start")
import _socket, socket, sqlite3, time
listener = _socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.bind(("127.0.0.1", 0))
listener.listen(16)
client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
client.connect(listener.getsockname())
peer = _socket.socket(fileno=listener._accept()[0])
buffer = bytearray(4096)
db = sqlite3.connect(os.path.join(work, "ops.db"))
db.execute("CREATE TABLE hits (id INTEGER PRIMARY KEY, path TEXT, size INT)")
"""
OPERATIONS = {
    "time.time()": "time.time()",
    "socket() + close()": "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()",
    "setsockopt()": "client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)",
    "sendall() + recv_into(), 100 B": (
        "client.sendall(b'x' * 100); peer.recv(4096); peer.send(b'y' * 100); "
        "client.recv_into(buffer)"
    ),
    "sqlite3 INSERT (execute)": (
        "db.execute('INSERT INTO hits (path, size) VALUES (?, ?)', ('/item/1', 2048))"
    ),
    "sqlite3 SELECT (execute + fetchone)": (
        "db.execute('SELECT size FROM hits WHERE id = ?', (1,)).fetchone()"
    ),
}
OPERATION_MODES = ("plain", "native")


def measure_operations(repeats: int, work: Path, env: dict[str, str]) -> dict[str, Any]:
    script = work / "operations.py"
    body = "".join(
        f"if operation == {name!r}:\n    for _ in range(n):\n        {code}\n"
        for name, code in OPERATIONS.items()
    )
    script.write_text(OPERATIONS_PROLOGUE + body)
    results: dict[str, Any] = {}
    for index, name in enumerate(OPERATIONS):
        figures = {}
        for mode in OPERATION_MODES:
            counts = []
            for n in (0, repeats):
                run = work / f"op{index}-{mode}-{n}"
                counts.append(_callgrind(script, [mode, name, str(n), str(run)], run, env)["01"])
            figures[mode] = (counts[1] - counts[0]) / repeats
        figures["added"] = figures["native"] - figures["plain"]
        results[name] = figures
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2000, help="of each single operation")
    parser.add_argument(
        "--json", default=str(Path(__file__).parent / "results" / "record_instructions.json")
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("record_instructions: valgrind is not installed")
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("SEALTRACE_RECORDER", None)
    with tempfile.TemporaryDirectory(prefix="sealtrace-instr-") as tmp:
        work = Path(tmp)
        server, port = _server(work, env)
        try:
            results = {mode: measure(mode, args.requests, port, work, env) for mode in MODES}
        finally:
            server.terminate()
            server.wait()
        operations = measure_operations(args.repeats, work, env)
    plain = results["plain"]["app_thread_per_request"]
    print(f"I/O-bound workload, {args.requests} requests; instructions a request")
    header = ("mode", "application thread", "added", "added %", "background")
    print(" | ".join(f"{h:>{w}s}" for h, w in zip(header, (8, 18, 8, 7, 10), strict=True)))
    for mode, figures in results.items():
        app = figures["app_thread_per_request"]
        added = app - plain
        figures["added_per_request"] = added
        figures["added_fraction"] = added / plain
        print(
            f"{mode:8s} | {app:18,.0f} | {added:8,.0f} | {added / plain:7.1%} |"
            f" {figures['other_threads_per_request']:10,.0f}"
        )
    print(f"\nOne operation, {args.repeats} times; instructions an operation")
    print(f"{'operation':36s} | {'plain':>8s} | {'recorded':>8s} | {'added':>8s}")
    for name, figures in operations.items():
        print(
            f"{name:36s} | {figures['plain']:8,.0f} | {figures['native']:8,.0f} |"
            f" {figures['added']:8,.0f}"
        )
    report = {
        "bench": "record_instructions",
        "requests": args.requests,
        "repeats": args.repeats,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "modes": results,
        "operations": operations,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
