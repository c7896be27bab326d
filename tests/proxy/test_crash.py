"""A writer killed with SIGKILL mid-stream leaves a recording that opens to its last sealed
chunk and reports itself incomplete."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from ..conftest import KeyFiles, run_cli

BLOCK = 3000


def block(i: int) -> bytes:
    return bytes([i % 251]) * BLOCK


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from sealtrace.proxy import LocalDirStore, Recipient, SealedWriter
    out, pub = Path(sys.argv[1]), Path(sys.argv[2])
    w = SealedWriter(LocalDirStore(out), Recipient.load(pub), "run-killed",
                     chunk_size=1024, segment_size=16 * 1024)
    i = 0
    while True:
        w.write(bytes([i % 251]) * 3000)
        w.flush()
        print(i, flush=True)
        i += 1
        w.write(bytes([i % 251]) * 3000)  # written but never flushed: must not be readable
        i += 1
        time.sleep(0.01)
    """
)


def test_sigkilled_writer_leaves_an_incomplete_but_readable_recording(
    tmp_path: Path, keys: KeyFiles
) -> None:
    rec = tmp_path / "rec"
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(rec), str(keys.recipient_path)],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        flushed = [int(proc.stdout.readline()) for _ in range(6)]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert flushed == [0, 2, 4, 6, 8, 10]

    refused = run_cli("open", "--identity", str(keys.identity_path), str(rec))
    assert refused.returncode == 4
    assert b"incomplete after chunk" in refused.stderr
    assert b"Traceback" not in refused.stderr

    opened = run_cli("open", "--allow-incomplete", "--identity", str(keys.identity_path), str(rec))
    assert opened.returncode == 0, opened.stderr
    assert b"incomplete after chunk" in opened.stderr
    # Everything flushed before the kill is there, in order; nothing unflushed leaks through
    # as a partial block, and nothing is invented.
    assert len(opened.stdout) % BLOCK == 0 and len(opened.stdout) >= 11 * BLOCK
    expected = b"".join(block(i) for i in range(len(opened.stdout) // BLOCK))
    assert opened.stdout == expected

    inspected = run_cli("inspect", "--json", str(rec))
    assert inspected.returncode == 0
    assert b'"completeness": "incomplete (no final chunk)"' in inspected.stdout
