"""Rotation through the server (issue 23, item 5): `sealtrace record --server ... --rotate-size`
goes on in runs whose keys the server leased, each registered as its header appears and
finished when the program ends (proxy/_recording_cli.py's PlatformRuns, _rotation.py's feed).

Through the real `sealtrace record --server` and the real server (SQLite, moto's KMS): every
run of the line is a run the server leased, lists and knows where it is stored, each but the
first a continuation of the one before; the lease kept waiting for a rotation that never came
is not listed as a recording.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sealtrace.proxy import describe_recording
from sealtrace.proxy._store import open_store

from .conftest import SEALTRACE, RecordServer

BATCH = """
import sys, time
total = 0
for i in range(300):
    with open(sys.argv[1]) as f:
        total += len(f.read())
    time.sleep(0.003)  # (a rotation takes a lease the feed had waiting; it refills in 0.2 s)
print("total", total)
"""


@pytest.mark.integration
def test_a_rotated_run_goes_on_in_runs_the_server_leased(
    record_server: RecordServer, tmp_path: Path
) -> None:
    app, data, store = tmp_path / "app.py", tmp_path / "data.txt", tmp_path / "store"
    app.write_text(textwrap.dedent(BATCH))
    data.write_text("y" * 2000)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "SEALTRACE_TOKEN": record_server.record_token}  # fmt: skip
    proc = subprocess.run(
        [SEALTRACE, "record", "--server", record_server.url, "--store", str(store),
         "--rotate-size", "64K", "--", sys.executable, str(app), str(data)],
        env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, b"total 600000\n"), proc.stderr.decode()
    assert b"sealtrace" not in proc.stderr, proc.stderr.decode()

    runs = sorted(store.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert len(runs) >= 3
    continuations = 0
    for location in runs:
        report = describe_recording(open_store(str(location)))
        assert report.run_id == location.name  # stored under the leased run's id
        continuations += report.continues is not None
        listed = record_server.run(report.run_id)
        assert (listed["status"], listed["store"]) == ("complete", str(location)), listed
        assert listed["exit_status"] == 0
    assert continuations == len(runs) - 1  # every run but the first goes on from another
    # The leases still waiting in the feed when the program ended went back to the host's
    # pool, for the next runs: the server lists none of them.
    code, listed_runs = record_server.request("GET", "/v1/runs?limit=1000",
                                              record_server.user_token)  # fmt: skip
    assert code == 200
    [pool] = (tmp_path / "cache" / "sealtrace").glob("leases-*.json")
    pooled = {entry[0] if isinstance(entry, list) else entry["run_id"]
              for entry in json.loads(pool.read_text())["keys"]}  # fmt: skip
    assert pooled and not pooled & {r["run_id"] for r in listed_runs}
    assert not pooled & {p.name for p in runs}


def test_the_lease_feed_carries_whole_leases_and_refuses_anything_else(tmp_path: Path) -> None:
    """The feed's records: a lease read back is the one written; a record that is not one
    (noise the program wrote into the FIFO) is skipped, never used."""
    from sealtrace.proxy._keys import generate_identity
    from sealtrace.proxy._rotation import LEASE_RECORD, LeasedRuns, decode_lease, encode_lease

    recipient = generate_identity().recipient
    record = encode_lease("run-abc", recipient.raw)
    assert len(record) == LEASE_RECORD
    decoded = decode_lease(record)
    assert decoded is not None and decoded[0] == "run-abc"
    assert decoded[1].raw == recipient.raw
    assert decode_lease(b"x" * LEASE_RECORD) is None
    assert decode_lease(encode_lease("../escape", recipient.raw)) is None  # not a location

    fifo = tmp_path / "feed"
    os.mkfifo(fifo, 0o600)
    holder = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        feed = LeasedRuns(str(fifo))
        assert feed("run-0", "run-0", "") is None  # empty: no rotation yet
        os.write(holder, b"noise".ljust(LEASE_RECORD))
        os.write(holder, record)
        taken = feed("run-0", "run-0", "")
        assert taken is not None and taken[0] == taken[2] == "run-abc"
        assert feed("run-0", "run-0", "") is None
    finally:
        os.close(holder)
    assert LeasedRuns(str(tmp_path / "missing"))("run-0", "run-0", "") is None


PARENT = """
import subprocess, sys
child = subprocess.run([sys.executable, "-c", "import sys; print(sum(map(int, sys.argv[1:])))",
                        "20", "22"], capture_output=True, text=True)
print("child said", child.stdout.strip())
"""


@pytest.mark.integration
def test_a_python_child_records_under_a_key_the_server_leased(
    record_server: RecordServer, tmp_path: Path
) -> None:
    """Without rotation too, `record --server` keeps a lease waiting for a Python child the
    program starts: the child's run is one the server leased and lists, stored beside its
    parent's; the lease left over goes back to the pool."""
    app, store = tmp_path / "app.py", tmp_path / "store"
    app.write_text(textwrap.dedent(PARENT))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "SEALTRACE_TOKEN": record_server.record_token}  # fmt: skip
    proc = subprocess.run(
        [SEALTRACE, "record", "--server", record_server.url, "--store", str(store), "--",
         sys.executable, str(app)],
        env=env, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, b"child said 42\n"), proc.stderr.decode()
    runs = sorted(store.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert len(runs) == 2  # the parent's and the child's
    for location in runs:
        report = describe_recording(open_store(str(location)))
        assert report.run_id == location.name and report.continues is None
        listed = record_server.run(report.run_id)
        assert (listed["status"], listed["store"]) == ("complete", str(location)), listed
    [pool] = (tmp_path / "cache" / "sealtrace").glob("leases-*.json")
    assert json.loads(pool.read_text())["keys"]  # the lease kept waiting, given back
