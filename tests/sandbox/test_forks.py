"""Forked processes: both sides of a fork are recorded, and each replays as its own process.

The recorder gives every process the program forks (os.fork, multiprocessing's fork context,
a pool's workers, a child's own children) a stream of its own in the same recording; `replay`,
`trace` and the rest take `--process PATH` ("1", "3.1") to replay the run as that process
did: its parent's run up to the fork, then its own. These tests record real programs, delete
their inputs, and replay every process bit-exact; a value in a child traces back through the
fork to the parent's input. A process that is not there, a path that is not one, and a
segment moved between processes are refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import (
    PYTHON,
    assert_bit_exact,
    line_of,
    record,
    replay,
    trace_json,
    walk,
    write_app,
)

pytestmark = pytest.mark.integration

FORK = """\
import os, random, threading, time

with open({prices!r}) as f:
    base = int(f.read().split()[0])
ready = threading.Event()
waiter = threading.Thread(target=ready.wait)
waiter.start()  # waiting while the program forks: the child has only the forking thread
pid = os.fork()
if pid == 0:
    with open({extra!r}) as f:
        extra = int(f.read())
    total = base * 2 + extra + random.randint(0, 9)
    print("child total", total, threading.active_count(), flush=True)
    os._exit(3)
ready.set()
waiter.join()
_, status = os.waitpid(pid, 0)
print("parent saw", os.waitstatus_to_exitcode(status), "base", base, time.time() > 0)
"""

PRINT_TOTAL = 'print("child total"'

MULTIPROCESSING = """\
import multiprocessing as mp, os, threading, time


def work(q, n):
    with open({extra!r}) as f:
        extra = int(f.read())
    q.put(n * 100 + extra)


def nested():
    pid = os.fork()
    if pid == 0:
        with open({extra!r}) as f:
            print("grandchild", int(f.read()) * 7, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print("child done", flush=True)


def price(n):
    with open({extra!r}) as f:
        return n * int(f.read())


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    ticks = []
    ticker = threading.Thread(target=lambda: ticks.append(time.time()))
    ticker.start()
    q = ctx.Queue()
    procs = [ctx.Process(target=work, args=(q, n)) for n in (1, 2)]
    for p in procs:
        p.start()
    got = sorted(q.get() for _ in procs)
    for p in procs:
        p.join()
    ticker.join()
    third = ctx.Process(target=nested)
    third.start()
    third.join()
    pool = ctx.Pool(2)
    print("got", got, pool.map(price, range(4)), third.exitcode, flush=True)
    pool.close()
    pool.join()
"""


def _inputs(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "prices.txt").write_text("40 1\n")
    (data / "extra.txt").write_text("2\n")
    return {"prices": str(data / "prices.txt"), "extra": str(data / "extra.txt")}


def _recorded(tmp_path: Path, keys: KeyFiles, source: str) -> tuple[Path, Path, bytes]:
    inputs = _inputs(tmp_path)
    app = write_app(tmp_path / "app", source.format(**inputs))
    store = tmp_path / "rec"
    rec = record(keys, store, [PYTHON, str(app)])
    assert rec.proc.returncode == 0, rec.proc.stderr.decode()
    assert b"sealtrace:" not in rec.proc.stderr, rec.proc.stderr.decode()
    shutil.rmtree(tmp_path / "data")  # replay must need none of the inputs
    return app, store, rec.proc.stdout


def _external(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes of a trace that are external inputs."""
    return [n for n in walk(doc["root"]) if (n.get("origin") or {}).get("kind") == "external"]


def _processes(store: Path) -> dict[str, str]:
    proc = run_cli("inspect", str(store), "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    processes: dict[str, str] = json.loads(proc.stdout)["processes"]
    return processes


def test_a_fork_is_recorded_on_both_sides_and_each_replays_bit_exact(
    tmp_path: Path, keys: KeyFiles
) -> None:
    _app, store, stdout = _recorded(tmp_path, keys, FORK)
    lines = stdout.decode().splitlines()
    assert lines[-1] == "parent saw 3 base 40 True"
    assert lines[0].startswith("child total ") and lines[0].endswith(" 1")  # one thread
    assert _processes(store) == {"1": "claims complete (unverified)"}
    parent = assert_bit_exact(*replay(keys, store))
    assert parent["exit_status"]["recorded"] == 0
    child = assert_bit_exact(*replay(keys, store, "--process", "1"))
    # The child's run: its parent's up to the fork, then its own, to its os._exit(3).
    assert child["exit_status"] == {"recorded": 3, "replayed": 3}


def test_a_value_in_the_child_traces_back_through_the_fork(tmp_path: Path, keys: KeyFiles) -> None:
    app, store, _ = _recorded(tmp_path, keys, FORK)
    at = f"{app}:{line_of(app.read_text(), PRINT_TOTAL)}"
    doc = trace_json(store, keys, at, "total", "--process", "1")
    reads = {
        node["value"]["repr"]: node["origin"]["event"]
        for node in _external(doc)
        if node["origin"]["call"] == "file.readall"
    }
    # The parent's read before the fork and the child's own, both reached; the parent's
    # comes first in the run the child replays.
    assert set(reads) == {"'40 1\\n'", "'2\\n'"}, reads
    assert reads["'40 1\\n'"] < reads["'2\\n'"]


def test_multiprocessing_queues_pools_and_nested_forks_replay_every_process(
    tmp_path: Path, keys: KeyFiles
) -> None:
    _app, store, stdout = _recorded(tmp_path, keys, MULTIPROCESSING)
    assert b"grandchild 14\n" in stdout and b"child done\n" in stdout
    assert stdout.endswith(b"got [102, 202] [0, 2, 4, 6] 0\n")
    processes = _processes(store)
    # Two queue workers, the nested one and its child, two pool workers.
    assert sorted(processes) == ["1", "2", "3", "3.1", "4", "5"], processes
    assert set(processes.values()) == {"claims complete (unverified)"}
    for path in ("", *processes):
        assert_bit_exact(*replay(keys, store, *(("--process", path) if path else ())))


def test_processes_that_are_not_there_are_refused(tmp_path: Path, keys: KeyFiles) -> None:
    _app, store, _ = _recorded(tmp_path, keys, FORK)
    for path, message in (("2", "has no process 2"), ("1.x", "not a process path")):
        proc, _ = replay(keys, store, "--process", path)
        assert proc.returncode == 2, proc.stderr.decode()
        assert proc.stderr.decode().count("sealtrace: error:") == 1
        assert message in proc.stderr.decode()
    # A segment moved to another process's name opens under no key but its own.
    moved = store / "proc-2-seg-000000"
    moved.write_bytes((store / "proc-1-seg-000000").read_bytes())
    proc, _ = replay(keys, store, "--process", "2")
    assert proc.returncode == 4 and b"failed authentication" in proc.stderr, proc.stderr


def test_a_fork_that_runs_another_program_records_nothing_of_it(
    tmp_path: Path, keys: KeyFiles
) -> None:
    # subprocess forks in C and runs preexec_fn in the child before its exec: that child is
    # no process of the program's, and its copy of the recorder records nothing.
    source = (
        "import subprocess, sys\n"
        "done = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], preexec_fn=lambda: None,\n"
        "                      capture_output=True, text=True)\n"
        "print('answer', done.stdout.strip())\n"
    )
    _app, store, stdout = _recorded(tmp_path, keys, source)
    assert stdout == b"answer 42\n"
    assert _processes(store) == {}
    assert_bit_exact(*replay(keys, store))


def test_a_forked_process_replays_and_traces_in_the_sandbox(
    tmp_path: Path, keys: KeyFiles, replay_image: str
) -> None:
    app, store, _ = _recorded(tmp_path, keys, FORK)
    receipt: dict[str, Any] | None
    proc, receipt = replay(keys, store, "--sandbox", "--process", "1")
    assert_bit_exact(proc, receipt)
    at = f"{app}:{line_of(app.read_text(), PRINT_TOTAL)}"
    traced = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--sandbox",
        "--process", "1", "--at", at, "--var", "total", "--json",
    )  # fmt: skip
    assert traced.returncode == 0, traced.stderr.decode()
    reads = [node["value"]["repr"] for node in _external(json.loads(traced.stdout))]
    assert "'40 1\\n'" in reads and "'2\\n'" in reads, reads
