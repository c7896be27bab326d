"""Signals: a Python handler's delivery is recorded, and replay runs the handler at its place.

The interpreter runs a signal's Python handler on the main thread, inside the boundary call
it interrupted (a sleep, a select, a lock's acquire) or between two instructions. The
recorder records each delivery as an event (`signal.deliver`, inside a call or not) and the
handler's own calls; replay, where no signal from outside reaches the program, runs the
program's handler at the call it came during, or at the thread's next call. These programs
are stopped, woken and interrupted by signals, and replay bit-exact with their inputs
deleted; a recording with a delivery taken out diverges instead of answering otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sealtrace.proxy._codec import Decoder, decode_value
from sealtrace.proxy._stream import CALL, NAME

from ..conftest import KeyFiles, run_cli, seal_cli
from .replaying import (
    PYTHON,
    assert_bit_exact,
    line_of,
    rebuilt_stream,
    record,
    replay,
    stream_records,
    trace_json,
    walk,
    write_app,
)

pytestmark = pytest.mark.integration

PROGRAM = """\
import os, signal, threading, time

got = []


def on_usr1(signum, frame):
    with open({extra!r}) as f:  # a handler's own call, recorded and replayed
        got.append(int(f.read()))


signal.signal(signal.SIGUSR1, on_usr1)
threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
while not got:
    # The signal comes during a sleep: its handler runs inside it (and the sleep goes on to
    # its end). A sleep much longer than the timer's wait, not a loop of short ones: on a
    # loaded machine the signal once came between two of them, where the handler runs between
    # two instructions and its replay waits for the next call (docs/replay.md: a place the
    # replay reports as a divergence rather than answer from).
    time.sleep(1)
print("handler read", got[0], time.time() > 0)
try:
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
    time.sleep(5)  # SIGINT's default handler raises KeyboardInterrupt out of the sleep
except KeyboardInterrupt:
    print("interrupted")
raised = []
signal.signal(signal.SIGUSR2, lambda signum, frame: raised.append(signum))
signal.raise_signal(signal.SIGUSR2)  # delivered at once, by the program itself
print("raised", raised, signal.getsignal(signal.SIGUSR2) is not None)
total = got[0] * 10
print("total", total)
"""


def _recorded(tmp_path: Path, keys: KeyFiles) -> tuple[Path, Path, str]:
    extra = tmp_path / "extra.txt"
    extra.write_text("5\n")
    source = PROGRAM.format(extra=str(extra))
    app = write_app(tmp_path / "app", source)
    store = tmp_path / "rec"
    rec = record(keys, store, [PYTHON, str(app)])
    assert rec.proc.returncode == 0, rec.proc.stderr.decode()
    assert rec.proc.stdout == b"handler read 5 True\ninterrupted\nraised [12] True\ntotal 50\n"
    extra.unlink()
    return app, store, source


def test_signal_handlers_replay_at_their_place_and_their_reads_trace(
    tmp_path: Path, keys: KeyFiles
) -> None:
    app, store, source = _recorded(tmp_path, keys)
    assert_bit_exact(*replay(keys, store))
    at = line_of(source, 'print("total"')
    doc = trace_json(store, keys, f"{app}:{at}", "total")
    reads = [
        node["value"]["repr"]
        for node in walk(doc["root"])
        if (node.get("origin") or {}).get("call") == "file.readall"
    ]
    assert reads == ["'5\\n'"], reads  # read by the handler, inside the interrupted sleep


def test_a_delivery_taken_out_of_the_recording_is_a_divergence(
    tmp_path: Path, keys: KeyFiles
) -> None:
    # The negative control: without its recorded delivery the handler never runs on
    # replay, and the program waits for a flag no one sets. It must be reported, not
    # answered (the sleep's recorded events run out, or the next call is not the one
    # recorded).
    _app, store, _ = _recorded(tmp_path, keys)
    opened = run_cli("open", str(store), "--identity", str(keys.identity_path))
    assert opened.returncode == 0, opened.stderr
    records = stream_records(opened.stdout)
    names = [decode_value(body) for kind, body in records if kind == NAME]
    deliver = names.index("signal.deliver")
    first = next(
        i
        for i, (kind, body) in enumerate(records)
        if kind == CALL and Decoder(body).varint() == deliver
    )
    run_id = decode_value(records[0][1])["run_id"]
    seal_cli(keys, str(tmp_path / "cut"), rebuilt_stream(records[:first] + records[first + 1 :]),
             run_id=run_id)  # fmt: skip
    proc, receipt = replay(keys, tmp_path / "cut")
    assert proc.returncode == 3 and receipt is not None, proc.stderr.decode()
    assert receipt["status"] == "diverged"
