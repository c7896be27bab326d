"""Record a program with the real `sealtrace record`, then replay it with `sealtrace replay`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.proxy import Identity
from sealtrace.proxy._codec import Decoder, _write_varint, decode_value, encode_value
from sealtrace.proxy._stream import EXIT, stream_prefix
from sealtrace.sandbox._replay_process import load_recording

from ..conftest import KeyFiles, run_cli

PYTHON = sys.executable


@dataclass
class Recorded:
    proc: subprocess.CompletedProcess[bytes]
    location: Path | str

    def callees(self, identity: Identity) -> list[str]:
        _, parsed = load_recording(str(self.location), identity)
        return [e.callee for e in parsed.events]


def write_app(directory: Path, source: str, name: str = "app.py") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


def promotions_database(path: Path) -> Path:
    """The pricing story's promotions table: the staff code STAFF100 (100 %) and TEN."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE promotions (code TEXT PRIMARY KEY, discount_pct REAL)")
        db.executemany("INSERT INTO promotions VALUES (?, ?)", [("STAFF100", 100.0), ("TEN", 10.0)])
    db.close()
    return path


@contextlib.contextmanager
def recorded_server(
    keys: KeyFiles, location: Path, command: list[str], *options: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A server recorded while it serves: `command` under `sealtrace record` (with its
    `options`), whose first line on stdout is its port. Yields the recorder and the port;
    whoever uses it makes the server stop and waits for the recorder. A recorder still
    running at the end is killed."""
    exe = Path(sys.executable).with_name("sealtrace")
    recorder = subprocess.Popen(
        [str(exe), "record", "--recipient", str(keys.recipient_path), "--output",
         str(location), *options, "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert recorder.stdout is not None
        yield recorder, int(recorder.stdout.readline())
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.wait()


def line_of(source: str, text: str) -> int:
    """The number of the first line of `source` that holds `text`."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def record(
    keys: KeyFiles,
    location: Path | str,
    command: list[str],
    *options: str,
    env: dict[str, str] | None = None,
    stdin: bytes = b"",
    cwd: Path | None = None,
) -> Recorded:
    exe = Path(sys.executable).with_name("sealtrace")
    argv = [str(exe), "record", "--recipient", str(keys.recipient_path), "--output", str(location)]
    proc = subprocess.run(
        [*argv, *options, "--", *command],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
        check=False,
    )
    return Recorded(proc, location)


def replay(
    keys: KeyFiles, location: Path | str, *extra: str, prefix: list[str] | None = None
) -> tuple[subprocess.CompletedProcess[bytes], dict[str, Any] | None]:
    """`sealtrace replay --json`, in-process unless `extra` asks for the sandbox: these tests
    replay programs they wrote themselves."""
    if "--sandbox" not in extra:
        extra = ("--in-process", *extra)
    if prefix:
        exe = Path(sys.executable).with_name("sealtrace")
        proc = subprocess.run(
            [*prefix, str(exe), "replay", str(location), "--identity", str(keys.identity_path),
             "--json", *extra],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
    else:
        proc = run_cli(
            "replay", str(location), "--identity", str(keys.identity_path), "--json", *extra
        )
    try:
        receipt = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        receipt = None
    return proc, receipt


def assert_bit_exact(
    proc: subprocess.CompletedProcess[bytes], receipt: dict[str, Any] | None
) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr.decode()
    assert receipt is not None and receipt["status"] == "bit-exact", receipt
    assert receipt["events_replayed"] == receipt["events_recorded"] > 0
    if receipt["exit_status"]["recorded"] is not None:  # None: an embedded recorder's run
        assert receipt["exit_status"]["replayed"] == receipt["exit_status"]["recorded"]
    return receipt


def trace_json(store: Path, keys: KeyFiles, at: str, var: str, *extra: str) -> dict[str, Any]:
    """`sealtrace trace --in-process --json` of a recording, asserted to answer."""
    proc = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), "--in-process",
        "--at", at, "--var", var, "--json", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def without_passes(doc: dict[str, Any]) -> dict[str, Any]:
    """A trace without its pass count (which counts every pass the inquiry has made)."""
    return {**doc, "query": {k: v for k, v in doc["query"].items() if k != "passes"}}


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a trace's tree, the root first."""
    yield node
    for child in node["inputs"]:
        yield from walk(child)


def stream_records(data: bytes) -> list[tuple[int, bytes]]:
    """The (kind, body) records of a plaintext event stream, in order."""
    dec = Decoder(data)
    dec.pos = len(stream_prefix())
    out = []
    while dec.pos < len(data):
        kind = dec.take(1)[0]
        out.append((kind, dec.take(dec.varint())))
    return out


def rebuilt_stream(records: list[tuple[int, bytes]]) -> bytes:
    """Re-assemble a stream with a correct EXIT digest (a forger who has the plaintext)."""
    out = bytearray(stream_prefix())
    hasher = hashlib.blake2b(digest_size=32)
    for kind, body in records:
        if kind == EXIT:
            value = decode_value(body)
            value["digest"] = hasher.digest()
            body = encode_value(value)
        rec = bytearray((kind,))
        _write_varint(rec, len(body))
        rec += body
        hasher.update(rec)
        out += rec
    return bytes(out)
