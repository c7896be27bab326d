"""Objects remember what filled them, and flows reach outputs (issue 22, items 2 and 4).

One recorded program reads two files, a database and its own log through C objects that keep
what was read in internal state: a csv reader's first row reads the whole file into the text
wrapper's buffer, a binary file's header read fills its buffered reader, a sqlite3 row factory
is handed each recorded row, an io.StringIO is written and read back. What comes out of them
later, with no read of its own, must trace to the recorded read that brought it in, never to
the reader object or a constant; and never to the other file's read (the decoy). Forward, an
email logged through `logging` to a file and to stdout and inserted into the database reaches
those three outputs and none of the others.
"""

from __future__ import annotations

import json
import sqlite3
import struct
import sys
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import record, trace_json, walk, write_app

APP = """
import csv
import io
import logging
import sqlite3
import struct
import sys

with open("decoy.csv", newline="") as fh:
    decoy_rows = list(csv.reader(fh))  # the decoy read
with open("sales.csv", newline="") as fh:
    reader = csv.reader(fh)
    header = next(reader)  # reads the whole file into fh's buffer
    sales = 0.0
    for category, amount in reader:  # rows out of the buffer: no read of their own
        sales += float(amount)

with open("meter.bin", "rb") as fh:
    magic, count = struct.unpack("<4sI", fh.read(8))  # fills the buffered reader
    kwh = 0.0
    for _ in range(count):
        kwh += struct.unpack("<f", fh.read(4))[0]  # out of its buffer

with open("notes.txt") as fh:
    first_line = fh.readline()
    second_line = fh.readline()  # out of the text wrapper's buffer

def dict_factory(cursor, row):
    return {column[0]: row[i] for i, column in enumerate(cursor.description)}

db = sqlite3.connect("shop.db")
db.row_factory = dict_factory
price = db.execute("select price from items").fetchone()["price"]
db.row_factory = sqlite3.Row
qty = db.execute("select qty from items").fetchone()["qty"]

kept = io.StringIO()
kept.write(second_line.upper())
kept_text = kept.getvalue()

log = logging.getLogger("signups")
log.setLevel(logging.INFO)
to_file = logging.FileHandler("signups.log")
to_file.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
log.addHandler(to_file)
log.addHandler(logging.StreamHandler(sys.stdout))
for name, email in decoy_rows:
    log.info("signup %s", email)  # the flow starts at the first email
    db.execute("insert into signups values (?)", (email,))
log.info("count %d", len(decoy_rows))
to_file.close()

with open("long.txt") as fh:  # many reads: a line deep in it names the one that brought it
    for text in fh:
        if text.startswith("MARK"):
            marked = text.upper()
print("done")
"""

SALES = "category,amount\nbooks,12.50\ntoys,7.25\n"
DECOY = "ana,ana@example.com\ntom,tom@example.com\n"
# About 60 reads of a text file's chunk, the marked line in the 50th or so: far more than the
# engine keeps of an object's fills (32), unless it knows the older ones were handed out.
LONG = "".join(f"{'MARK' if i == 4000 else 'line'} {i:06d} {'x' * 70}\n" for i in range(5000))


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles, Path]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("fills")
    keys = KeyFiles(*write_keypair(work / "keys", "fills"))
    app = write_app(work / "app", APP)
    data = work / "data"
    data.mkdir()
    (data / "sales.csv").write_text(SALES)
    (data / "decoy.csv").write_text(DECOY)
    (data / "meter.bin").write_bytes(struct.pack("<4sI", b"MTR1", 2) + struct.pack("<ff", 1.5, 2))
    (data / "notes.txt").write_text("first\nsecond\n")
    (data / "long.txt").write_text(LONG)
    with sqlite3.connect(data / "shop.db") as db:
        db.execute("create table items (price integer, qty integer)")
        db.execute("insert into items values (4999, 3)")
        db.execute("create table signups (email text)")
    db.close()
    recorded = record(
        keys, work / "store", [sys.executable, str(app)], "--app-root", str(app.parent), cwd=data
    )
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    assert recorded.proc.stdout.endswith(b"done\n")
    return work / "store", keys, app


def _line(text: str) -> int:
    return next(i for i, line in enumerate(APP.splitlines(), 1) if text in line)


def _trace(recording: tuple[Path, KeyFiles, Path], var: str) -> dict[str, Any]:
    store, keys, _app = recording
    done = _line('print("done")')
    return trace_json(store, keys, f"app.py:{done}", var)


_nodes = walk


def _externals(doc: dict[str, Any]) -> set[tuple[str, int]]:
    """(call, line) of every external origin in the answer."""
    return {
        (n["origin"]["call"], n["line"])
        for n in _nodes(doc["root"])
        if n["origin"] and n["origin"]["kind"] == "external"
    }


def _kinds(doc: dict[str, Any]) -> set[str]:
    return {n["origin"]["kind"] for n in _nodes(doc["root"]) if n["origin"]}


@pytest.mark.parametrize(
    ("var", "read_line"),
    [
        ("sales", "header = next(reader)"),  # csv rows out of the text wrapper's buffer
        ("kwh", "fh.read(8)"),  # a buffered reader's later reads
        ("second_line", "first_line = fh.readline()"),  # a text wrapper's later line
        ("kept_text", "first_line = fh.readline()"),  # io.StringIO written, read back
    ],
)
def test_what_a_buffer_hands_out_traces_to_the_read_that_filled_it(
    recording: tuple[Path, KeyFiles, Path], var: str, read_line: str
) -> None:
    doc = _trace(recording, var)
    externals = _externals(doc)
    reads = {line for call, line in externals if call.startswith("file.read")}
    assert reads == {_line(read_line)}, (var, externals)
    # Never the decoy file's read, and nothing said to be a constant where data came in.
    assert _line("decoy_rows = list(") not in {line for _call, line in externals}
    assert "unknown" not in _kinds(doc)


def test_a_line_deep_in_a_long_file_traces_to_the_one_read_that_brought_it(
    recording: tuple[Path, KeyFiles, Path],
) -> None:
    """A text file hands out each line from the newest chunk it read: once a `for` step had to
    read, every older chunk was handed out. So the line names one read, the one whose data
    holds it; not the 31 before it, not "older reads, not kept" (unknown), and not the
    file's `seekable()` (a flag, no content)."""
    from sealtrace.sandbox import load_recording

    store, keys, _app = recording
    doc = _trace(recording, "marked")
    reads = {
        n["origin"]["event"]
        for n in _nodes(doc["root"])
        if n["origin"]
        and n["origin"]["kind"] == "external"
        and n["line"] == _line("for text in fh")
    }
    _data, parsed = load_recording(str(store), keys.identity)
    holding = {
        e.index
        for e in parsed.events
        if e.callee == "file.read" and b"MARK 004000" in (parsed.decode(e) or b"")
    }
    assert len(holding) == 1
    assert reads == holding, (reads, holding)
    assert "unknown" not in _kinds(doc)
    assert not {call for call, _line in _externals(doc) if call.endswith((".seekable", ".tell"))}


@pytest.mark.parametrize("var", ["price", "qty"])
def test_a_row_factory_row_traces_to_the_fetch(
    recording: tuple[Path, KeyFiles, Path], var: str
) -> None:
    doc = _trace(recording, var)
    calls = {call for call, _line in _externals(doc)}
    assert "sqlite3.Cursor.fetchone" in calls, (var, calls)
    # The row came in with the fetch: no node of the factory's or the row's says "constant".
    constants = [
        n for n in _nodes(doc["root"])
        if n["origin"] and n["origin"]["kind"] == "constant" and n["value"]["repr"] in ("4999", "3")
    ]  # fmt: skip
    assert not constants


def test_flows_from_a_logged_email_reach_its_file_and_stdout_writes_only(
    recording: tuple[Path, KeyFiles, Path],
) -> None:
    store, keys, _app = recording
    logged = _line('log.info("signup %s", email)')
    proc = run_cli(
        "flows", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--from", f"email@app.py:{logged}", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    outputs = json.loads(proc.stdout)["outputs"]
    calls = sorted(o["call"] for o in outputs)
    # The first signup's line, written to the log file (at the handler's flush) and to stdout,
    # and its row sent to the database; not the second signup's, the count's or "done".
    assert calls == ["file.write", "sqlite3.Cursor.execute", "stdout.write"], outputs
