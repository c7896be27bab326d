"""Issue 21, finding 5: the lease pool is the recorded program's to write, but a key in it is
used only if it verifies as one the server leased (proxy/_lease_pool.py).

Through the real `sealtrace record --server` and the real server: a recorded program plants
a key pair of its own in the pool (a new entry, or a genuine entry with its key swapped), and
the next run on the host must not seal to it: the attacker's private key cannot open that
run's recording, and the run is one the server leased and lists as complete. A program that
breaks the pool instead (noise, a FIFO, a held lock, a back-off of its own) must neither stop
nor hang the next run. Then the pool's own rules, without a server.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from sealtrace.proxy import Identity, SealedReader, WrongIdentityError, describe_recording
from sealtrace.proxy._lease_pool import LeasePool, PooledKey, PoolState, pool_key
from sealtrace.proxy._store import open_store

from ..conftest import _free_port
from .conftest import SEALTRACE, RecordServer

# The attacker: whatever the pool's format, a well-formed entry with its own public key at
# the front, either new or a genuine one altered; it keeps the private key for later.
PLANT = """
import base64, glob, json, os, sys
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

how, keep = sys.argv[1], sys.argv[2]
private = X25519PrivateKey.generate()
public = base64.urlsafe_b64encode(private.public_key().public_bytes_raw()).decode().rstrip("=")
cache = os.environ["XDG_CACHE_HOME"]
[path] = glob.glob(os.path.join(cache, "sealtrace", "leases-*.json"))
with open(path) as f:
    pool = json.load(f)
first = pool["keys"][0]
victim = first[0] if isinstance(first, list) else first["run_id"]
run_id = "run-planted" if how == "planted" else victim
if isinstance(first, list):  # [run_id, public_key, store]
    entry = [run_id, public, first[2]]
else:
    entry = {**first, "run_id": run_id, "public_key": public}
if how == "planted":
    pool["keys"].insert(0, entry)
else:
    pool["keys"][0] = entry
with open(path, "w") as f:
    json.dump(pool, f)
with open(keep, "w") as f:
    json.dump({"private": private.private_bytes_raw().hex(), "run_id": run_id}, f)
"""

BENIGN = "import sys\nprint('priced', sum(range(10)))\nsys.exit(3)\n"


def _record(
    server: RecordServer, work: Path, program: str, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    app = work / "app.py"
    app.write_text(textwrap.dedent(program))
    env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache"),
           "SEALTRACE_TOKEN": server.record_token}  # fmt: skip
    return subprocess.run(
        [SEALTRACE, "record", "--server", server.url, "--store", str(work / "store"), "--",
         sys.executable, str(app), *args],
        env=env, capture_output=True, timeout=timeout, check=False,
    )  # fmt: skip


def _pool(work: Path) -> Path:
    [path] = (work / "cache" / "sealtrace").glob("leases-*.json")
    return path


def _sealtrace_lines(proc: subprocess.CompletedProcess[bytes]) -> list[str]:
    return [line for line in proc.stderr.decode().splitlines() if "sealtrace" in line]


def _newest_recording(work: Path, before: set[str]) -> Path:
    [new] = [p for p in (work / "store").iterdir() if p.name not in before]
    return new


def _record_benign(
    server: RecordServer, work: Path
) -> tuple[subprocess.CompletedProcess[bytes], Path]:
    """The benign program recorded: the recorder's result, and where the recording went."""
    before = {p.name for p in (work / "store").iterdir()}
    proc = _record(server, work, BENIGN)
    assert (proc.returncode, proc.stdout) == (3, b"priced 45\n"), proc.stderr
    return proc, _newest_recording(work, before)


def _genuine(
    server: RecordServer, proc: subprocess.CompletedProcess[bytes], location: Path, notice: str
) -> str:
    """The run was recorded under a lease the server gave, and the recorder said one line
    about the pool."""
    lines = _sealtrace_lines(proc)
    assert len(lines) == (1 if notice else 0) and notice in "".join(lines), proc.stderr
    run_id = describe_recording(open_store(str(location))).run_id
    assert run_id == location.name
    run = server.run(run_id)
    assert (run["status"], run["exit_status"], run["store"]) == ("complete", 3, str(location))
    return run_id


@pytest.mark.integration
@pytest.mark.parametrize("how", ["planted", "altered"])
def test_a_key_the_program_plants_in_the_pool_is_never_sealed_to(
    record_server: RecordServer, tmp_path: Path, how: str
) -> None:
    keep = tmp_path / "attacker.json"
    first = _record(record_server, tmp_path, PLANT, how, str(keep))
    assert first.returncode == 0, first.stderr
    attacker = json.loads(keep.read_text())
    identity = Identity.from_raw(bytes.fromhex(attacker["private"]))

    proc, location = _record_benign(record_server, tmp_path)
    with pytest.raises(WrongIdentityError):
        SealedReader(open_store(str(location)), identity)
    # Said once, by the first `sealtrace record` to read the pool after the plant: the
    # attacker's own, which keeps its unused leases there when its program ends, or the next.
    said = _sealtrace_lines(first) + _sealtrace_lines(proc)
    assert len(said) == 1 and "did not verify as the server's" in said[0], said
    run_id = _genuine(
        record_server, proc, location, "did not verify" if _sealtrace_lines(proc) else ""
    )
    assert run_id != attacker["run_id"]
    assert attacker["run_id"] not in _pool(tmp_path).read_text()  # dropped for good


SABOTAGE = ["noise", "backoff", "fifo", "locked"]


@pytest.mark.integration
@pytest.mark.parametrize("how", SABOTAGE)
def test_a_pool_the_program_broke_neither_stops_nor_hangs_the_next_run(
    record_server: RecordServer, tmp_path: Path, how: str
) -> None:
    first = _record(record_server, tmp_path, "print('first')")
    assert first.returncode == 0 and _sealtrace_lines(first) == [], first.stderr
    path = _pool(tmp_path)
    notice = {"noise": "did not verify", "backoff": "did not verify",
              "fifo": "is not a regular file", "locked": "stayed locked"}[how]  # fmt: skip
    holder = None
    if how == "noise":
        path.write_text(json.dumps({"keys": "x", "backoff": "soon", "retry_after": "later"}))
    elif how == "backoff":  # "do not ask the server for a long while", in both formats
        later = time.time() + 1e9
        backoff = {"retry_after": later, "backoff": 600, "mac": "00"}
        path.write_text(json.dumps({"keys": [], "retry_after": later, "backoff": backoff}))
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    else:
        holder = path.open("a")
        fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        started = time.monotonic()
        _genuine(record_server, *_record_benign(record_server, tmp_path), notice)
        assert time.monotonic() - started < 30
    finally:
        if holder is not None:
            holder.close()


@pytest.mark.integration
def test_the_recorders_own_back_off_holds(record_server: RecordServer, tmp_path: Path) -> None:
    """Control for the back-off case above: the back-off a recorder wrote itself (MACed) is
    kept, so an unreachable server is not asked again at once."""
    nowhere = RecordServer(f"http://127.0.0.1:{_free_port()}", record_server.record_token, "")
    for attempt in range(2):
        proc = _record(nowhere, tmp_path, BENIGN)
        assert (proc.returncode, proc.stdout) == (3, b"priced 45\n"), proc.stderr
        lines = _sealtrace_lines(proc)
        assert len(lines) == 1 and "not recording this run" in lines[0], proc.stderr
        assert ("not asking again yet" in lines[0]) is bool(attempt), lines
    assert "backoff" in json.loads(_pool(tmp_path).read_text())


# -- the pool's own rules ------------------------------------------------------------------

URL, TOKEN = "https://sealtrace.example", "st_0123456789abcdef_secret"
KEYS = [PooledKey(f"run-{i}", base64.urlsafe_b64encode(bytes([i]) * 32).decode().rstrip("="),
                  "s3://bucket/acme" if i % 2 else None) for i in range(3)]  # fmt: skip


def _pool_with(path: Path, keys: list[PooledKey], *, token: str = TOKEN, url: str = URL) -> None:
    with LeasePool(path, pool_key(token, url), lock_timeout=1).locked() as state:
        state.keys = list(keys)
        state.retry_after, state.backoff = 1234.5, 30.0


def _read(path: Path, *, token: str = TOKEN, url: str = URL) -> PoolState:
    with LeasePool(path, pool_key(token, url), lock_timeout=1).locked() as state:
        return state


def test_what_the_recorder_wrote_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    _pool_with(path, KEYS)
    state = _read(path)
    assert (state.keys, state.retry_after, state.backoff, state.dropped) == (KEYS, 1234.5, 30.0, 0)
    assert TOKEN not in path.read_text() and pool_key(TOKEN, URL).hex() not in path.read_text()


@pytest.mark.parametrize("field", ["run_id", "public_key", "store", "mac"])
def test_an_entry_changed_in_any_field_is_dropped(tmp_path: Path, field: str) -> None:
    path = tmp_path / "pool.json"
    _pool_with(path, KEYS)
    doc = json.loads(path.read_text())
    entry: dict[str, Any] = doc["keys"][1]
    entry[field] = "s3://elsewhere" if field == "store" else entry[field][:-2] + "AA"
    path.write_text(json.dumps(doc))
    state = _read(path)
    assert state.keys == [KEYS[0], KEYS[2]] and state.dropped == 1


def test_entries_and_back_off_of_another_token_or_server_do_not_verify(tmp_path: Path) -> None:
    others: list[dict[str, str]] = [{"token": "st_0123456789abcdef_other"},
                                    {"url": "https://elsewhere"}]  # fmt: skip
    for n, other in enumerate(others):
        path = tmp_path / f"pool-{n}.json"
        _pool_with(path, KEYS, **other)
        state = _read(path)
        assert state.keys == [] and state.retry_after == 0 and state.dropped == len(KEYS) + 1


def test_a_copied_entry_is_used_once(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    _pool_with(path, KEYS)
    doc = json.loads(path.read_text())
    doc["keys"] = doc["keys"][:1] * 3 + doc["keys"][1:]
    path.write_text(json.dumps(doc))
    assert _read(path).keys == KEYS


def test_a_planted_back_off_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "pool.json"
    _pool_with(path, KEYS)
    doc = json.loads(path.read_text())
    doc["backoff"]["retry_after"] = time.time() + 1e9
    path.write_text(json.dumps(doc))
    state = _read(path)
    assert state.retry_after == 0 and state.keys == KEYS and state.dropped == 1


@pytest.mark.parametrize("what", ["symlink", "fifo", "directory", "huge"])
def test_a_pool_that_is_not_a_pool_is_not_used_and_not_written(tmp_path: Path, what: str) -> None:
    path = tmp_path / "pool.json"
    elsewhere = tmp_path / "elsewhere.json"
    _pool_with(elsewhere, KEYS)
    if what == "symlink":
        path.symlink_to(elsewhere)
    elif what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    else:
        path.write_bytes(b" " * (2 << 20))
    noise = what == "huge"  # a regular file: read as noise (dropped), then rewritten
    state = _read(path)
    assert state.keys == [] and state.saved is noise and bool(state.problem) is not noise
    assert state.dropped == int(noise)
    assert _read(elsewhere).keys == KEYS  # not followed, not rewritten
