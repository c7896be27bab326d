"""A recording that never got its end (issue 23: a worker killed by a signal it has no handler
for, a pool's worker that `terminate()` killed, an OOM kill) replays as far as it goes with
`--allow-incomplete`: every recorded event up to the last whole record matches, replay stops
there (exit 3, status `stopped`, the stop marked incomplete), and questions are answered up
to it, with a note on stderr that the run is incomplete. Without the flag it is refused (exit
4), as before, and the refusal says how to go on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import PYTHON, record, replay, trace_json, write_app

pytestmark = pytest.mark.integration

KILLED = """\
import os, signal, time

total = 0
for i in range(300):  # past the recorder's flush (2 s, at a 256th call): it is stored
    with open({data!r}) as f:
        total += len(f.read()) * (i + 1)
    time.sleep(0.008)
print("total so far", total, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def killed(tmp_path: Path, keys: KeyFiles) -> Path:
    data = tmp_path / "data" / "numbers.txt"
    data.parent.mkdir()
    data.write_text("n" * 10)
    app = write_app(tmp_path / "app", KILLED.format(data=str(data)))
    store = tmp_path / "rec"
    done = record(keys, store, [PYTHON, str(app)])
    assert done.proc.returncode == 137 and b"total so far 451500" in done.proc.stdout
    shutil.rmtree(data.parent)
    return store


def test_a_killed_run_replays_as_far_as_it_goes(killed: Path, keys: KeyFiles) -> None:
    refused, _ = replay(keys, killed)
    assert refused.returncode == 4 and b"--allow-incomplete" in refused.stderr

    proc, receipt = replay(keys, killed, "--allow-incomplete")
    assert proc.returncode == 3, proc.stderr.decode()
    assert receipt is not None and receipt["status"] == "stopped"
    assert receipt["stop"]["incomplete"] is True
    assert receipt["events_replayed"] == receipt["events_recorded"] >= 256
    assert b"ends here, incomplete" in proc.stderr


def test_a_killed_run_answers_up_to_where_it_ends(killed: Path, keys: KeyFiles) -> None:
    proc = run_cli(
        "trace", str(killed), "--identity", str(keys.identity_path), "--in-process",
        "--at", "end", "--var", "total", "--allow-incomplete",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"incomplete" in proc.stderr and b"--at end is where it ends" in proc.stderr
    text = proc.stdout.decode()
    assert text.startswith("total = ")
    assert "External input: file.readall" in text


def test_a_killed_run_s_json_answer_says_where_the_recording_ends(
    killed: Path, keys: KeyFiles
) -> None:
    # `--at end` of an incomplete recording is where the recording ends, not the program's
    # end: the JSON answer says so as the text's note does, with the event it ends at.
    _, receipt = replay(keys, killed, "--allow-incomplete")
    assert receipt is not None
    doc = trace_json(killed, keys, "end", "total", "--allow-incomplete")
    assert doc["query"]["recording_end"] == {
        "events": receipt["stop"]["events"],
        "reason": receipt["stop"]["reason"],
        "incomplete": True,
        "continued_in": None,
    }
