"""Rotation (issue 23, item 5): a long-lived recording goes on in a new run at a size or a
request count, losing nothing.

`sealtrace record --rotate-size S` / `--rotate-requests N` ends the run with a ROTATED record
and goes on in a new one beside it (OUTPUT.2, OUTPUT.3, ...), sealed under a key of its own,
whose `continues` object carries the key of the run before. Each run then replays as its line
(every run before it, then its own), so every run is bit-exact on its own, a value in the
last run traces back to an input read in the first, and the request index of the last run
holds every request of the line, once. A `continues` object that is another run's, a run
before that is not the one named, and a line that cannot be reached are refused.
"""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sealtrace.proxy import Identity, LocalDirStore, SealedReader
from sealtrace.proxy._codec import decode_value, encode_value
from sealtrace.proxy._format import RecordingHeader, unwrap_recording_key
from sealtrace.proxy._stream import CONTINUES, ROTATED, chain_streams, parse_stream
from sealtrace.sandbox._replay_process import load_recording

from ..conftest import KeyFiles, run_cli
from .replaying import (
    PYTHON,
    assert_bit_exact,
    rebuilt_stream,
    record,
    recorded_server,
    replay,
    stream_records,
    trace_json,
    walk,
    write_app,
)
from .test_request_index import SHOP, _post, requests_json

pytestmark = pytest.mark.integration

BATCH = """\
import time

with open({prices!r}) as f:
    base = int(f.read().split()[0])
total = 0
for i in range(300):
    with open({lines!r}) as f:
        total += len(f.read()) + int(time.time() > 0)
total += base
print("total", total)
"""


def own_stream(run: Path, identity: Identity) -> bytes:
    """One run's own stream, as sealed (a continuation's begins with CONTINUES)."""
    return SealedReader(LocalDirStore(run), identity).read_all()


def _line(location: Path) -> list[Path]:
    """The runs of a rotated line: OUTPUT, then OUTPUT.2, OUTPUT.3, ... in order."""
    runs = [location]
    while (following := location.with_name(f"{location.name}.{len(runs) + 1}")).exists():
        runs.append(following)
    return runs


@pytest.fixture
def batch(tmp_path: Path, keys: KeyFiles) -> list[Path]:
    """A batch job recorded with --rotate-size 64K: several runs, its inputs then deleted."""
    data = tmp_path / "data"
    data.mkdir()
    prices, lines = data / "prices.txt", data / "lines.txt"
    prices.write_text("41 7\n")
    lines.write_text("x" * 2000)
    app = write_app(tmp_path / "app", BATCH.format(prices=str(prices), lines=str(lines)))
    store = tmp_path / "rec"
    done = record(keys, store, [PYTHON, str(app)], "--rotate-size", "64K")
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    assert done.proc.stdout == b"total 600341\n"
    assert b"sealtrace" not in done.proc.stderr  # the recorder said nothing: nothing failed
    shutil.rmtree(data)
    return _line(store)


def test_a_batch_rotated_by_size_replays_every_run_bit_exact(
    batch: list[Path], keys: KeyFiles
) -> None:
    assert len(batch) >= 3
    ids = []
    for number, run in enumerate(batch, 1):
        receipt = assert_bit_exact(*replay(keys, run))
        ids.append(receipt["run_id"])
        following = (receipt["stop"] or {}).get("continued_in")
        if number < len(batch):  # ends where the next run goes on: no exit of its own
            assert receipt["exit_status"] == {"recorded": None, "replayed": None}
            assert following == f"{ids[0]}.{number + 1}"
        else:
            assert following is None and receipt["exit_status"]["recorded"] == 0
    assert ids[1:] == [f"{ids[0]}.{n}" for n in range(2, len(batch) + 1)]
    # Every run's stream is its own (ROTATED ends all but the last, CONTINUES begins all
    # but the first), and the line read for the last holds every event once, in order.
    for number, run in enumerate(batch, 1):
        kinds = [kind for kind, _ in stream_records(own_stream(run, keys.identity))]
        assert (kinds[0] == CONTINUES) is (number > 1)
        assert (kinds[-1] == ROTATED) is (number < len(batch))
    _data, parsed = load_recording(str(batch[-1]), keys.identity)
    assert sorted(parsed.rotations.values()) == sorted(ids[1:])
    assert [e.index for e in parsed.events] == list(range(len(parsed.events)))

    inspected = run_cli("inspect", str(batch[-1]), "--identity", str(keys.identity_path))
    assert inspected.returncode == 0, inspected.stderr.decode()
    assert f"continues   run {ids[-2]} at {batch[-2]}" in inspected.stdout.decode()


def test_a_value_in_the_last_run_traces_to_a_read_in_the_first(
    batch: list[Path], keys: KeyFiles
) -> None:
    _data, parsed = load_recording(str(batch[-1]), keys.identity)
    first_run_ends = min(parsed.rotations)  # the event where the second run began
    doc = trace_json(batch[-1], keys, "end", "total", "--depth", "40")
    assert doc["root"]["value"]["repr"] == "600341"
    reads = {
        node["origin"]["event"]
        for node in walk(doc["root"])
        if (node.get("origin") or {}).get("kind") == "external"
    }
    prices = next(e.index for e in parsed.events if e.callee.endswith("readall"))
    assert prices < first_run_ends and prices in reads  # the prices file, read in run 1
    assert "recording_end" not in doc["query"]  # the line of runs reaches the program's end


def test_the_end_of_a_run_the_recorder_rotated_is_said_to_be_where_it_goes_on(
    batch: list[Path], keys: KeyFiles
) -> None:
    _data, parsed = load_recording(str(batch[0]), keys.identity)
    assert parsed.stop is not None
    doc = trace_json(batch[0], keys, "end", "total", "--depth", "2")
    assert doc["query"]["recording_end"] == {
        "events": parsed.stop["events"],
        "reason": parsed.stop["reason"],
        "incomplete": False,
        "continued_in": parsed.stop["continued_in"],
    }


def test_the_sandbox_says_where_a_rotated_run_ends_as_in_process(
    batch: list[Path], keys: KeyFiles, podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    # The agent rebuilds the answer from the sandbox's frames: it says where the recording
    # ends from the recording it holds, as the in-process answer does.
    proc = run_cli(
        "trace", str(batch[0]), "--identity", str(keys.identity_path), "--at", "end",
        "--var", "total", "--depth", "2", "--json",
        env={"SEALTRACE_PODMAN_SOCKET": podman_service[2]}, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    boxed = json.loads(proc.stdout)
    plain = trace_json(batch[0], keys, "end", "total", "--depth", "2")
    assert boxed["query"]["recording_end"] == plain["query"]["recording_end"]
    assert boxed["query"]["recording_end"]["continued_in"] is not None


def test_a_rotated_run_replays_in_the_sandbox(
    batch: list[Path], keys: KeyFiles, replay_image: str
) -> None:
    assert_bit_exact(*replay(keys, batch[1], "--sandbox"))


def test_the_key_of_the_run_before_is_sealed_in_the_continuation(
    batch: list[Path], keys: KeyFiles
) -> None:
    """Only the holder of a run's key learns the key of the run before it: the `continues`
    object holds that key sealed, never in the clear, and the line's plaintext (what the
    sandbox is given) holds no key either."""
    for before, run in itertools.pairwise(batch):
        header = RecordingHeader.decode((before / "header").read_bytes())
        with unwrap_recording_key(header.wrapped_key, keys.identity, header.run_id) as key:
            previous = bytes(key.view())
        assert previous not in (run / "continues").read_bytes()
        data, _ = load_recording(str(run), keys.identity)
        assert previous not in data


def test_a_threaded_server_rotated_by_requests_loses_no_request(
    tmp_path: Path, keys: KeyFiles
) -> None:
    app = write_app(tmp_path / "shop", SHOP)
    store = tmp_path / "rec"
    totals: list[float] = []
    with recorded_server(keys, store, [PYTHON, str(app)], "--rotate-requests", "3") as (
        recorder,
        port,
    ):
        for wave in range(3):  # concurrent orders: a rotation may find requests under way
            clients = [
                threading.Thread(target=lambda q=q: totals.append(_post(port, q)))
                for q in range(wave * 4 + 1, wave * 4 + 5)
            ]
            for client in clients:
                client.start()
            for client in clients:
                client.join()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/stop", timeout=60).read()
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    assert b"sealtrace" not in err
    runs = _line(store)
    assert len(runs) >= 3
    for run in runs:
        assert_bit_exact(*replay(keys, run))
    # The last run's index is its line's: all twelve orders (and /stop), each once.
    doc = requests_json(runs[-1], keys)
    index = doc["requests"]
    orders = [r for r in index if r["path"] == "/price"]
    assert len(orders) == 12 and all(r["status"] == 200 and r["complete"] for r in orders)
    assert len({r["first"] for r in index}) == len(index)
    # A run before holds fewer: the requests that ended in it and the runs before it.
    assert len(requests_json(runs[0], keys)["requests"]) < len(index)
    assert sorted(totals) == sorted(round(q * 9.99 * (1 - 0.1 * (q % 3)), 2) for q in range(1, 13))


def test_a_continuation_opens_only_as_its_own_run(
    batch: list[Path], keys: KeyFiles, tmp_path: Path
) -> None:
    """The previous run's key is sealed under a key derived from this run's, bound to this
    run's header: another run's `continues` object does not open here (exit 4), nor does a
    run put where the one before should be (another header), and a line that cannot be
    reached is a usage error (exit 2)."""
    second, third = batch[1], batch[2]
    swapped = tmp_path / "swapped"
    shutil.copytree(third, swapped.with_name(third.name + "-copy"))
    copy = swapped.with_name(third.name + "-copy")
    (copy / "continues").chmod(0o644)
    (copy / "continues").unlink()
    shutil.copy(second / "continues", copy / "continues")
    proc, _ = replay(keys, copy)
    assert proc.returncode == 4
    assert b"continues object failed authentication" in proc.stderr

    # The run before replaced by another recording of the same recipient.
    moved = batch[0].with_name("moved")
    batch[0].rename(moved)
    shutil.copytree(third, batch[0])
    proc, _ = replay(keys, second)
    assert proc.returncode == 4
    assert b"is not the run" in proc.stderr
    shutil.rmtree(batch[0])
    proc, _ = replay(keys, second)
    assert proc.returncode == 2 and b"no sealtrace recording at" in proc.stderr
    moved.rename(batch[0])
    assert_bit_exact(*replay(keys, second))  # control: the line put back replays


def test_a_line_whose_continuation_does_not_follow_on_is_refused(
    batch: list[Path], keys: KeyFiles
) -> None:
    """The CONTINUES record must say exactly where the run before ended: one that claims
    another event count (a run's stream spliced after another's) fails to parse."""
    first, second = (own_stream(run, keys.identity) for run in batch[:2])
    parse_stream(chain_streams([first, second]))  # control: the line as read parses
    records = stream_records(second)
    kind, body = records[0]
    assert kind == CONTINUES
    fields = decode_value(body)
    records[0] = (kind, encode_value({**fields, "events": fields["events"] - 1}))
    with pytest.raises(Exception, match="does not go on from where the run before it ended"):
        parse_stream(chain_streams([first, rebuilt_stream(records)]))
    with pytest.raises(Exception, match="does not start with its META"):
        parse_stream(second)  # a continuation alone is no run: it is read after its line


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--rotate-size", "1K"], "--rotate-size takes a size of at least 64K"),
        (["--rotate-size", "lots"], "--rotate-size takes a size"),
        (["--rotate-requests", "0"], "--rotate-requests"),
    ],
)
def test_bad_rotation_options_are_usage_errors(
    options: list[str], message: str, keys: KeyFiles, tmp_path: Path
) -> None:
    proc = run_cli(
        "record", "--recipient", str(keys.recipient_path), "--output", str(tmp_path / "r"),
        *options, "--", PYTHON, "-c", "pass",
    )  # fmt: skip
    assert proc.returncode == 2
    assert message in proc.stderr.decode()
    assert not (tmp_path / "r").exists()
