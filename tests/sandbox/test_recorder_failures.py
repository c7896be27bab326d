"""The recorder's own failures never change what the application does.

Each test runs the same program plainly and recorded-with-a-broken-recorder and compares
stdout and exit status byte for byte; stderr may only gain one line from sealtrace.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import KeyFiles
from .replaying import PYTHON, assert_bit_exact, record, replay, write_app

pytestmark = pytest.mark.integration

BUSY_APP = """
import os, sys, time
total = 0
for i in range(40000):
    total += int(time.time()) & 1
    if i % 5000 == 0:
        print("step", i, os.urandom(2) != b"")
print("done", total >= 0)
sys.exit(5)
"""


def _sealtrace_lines(stderr: bytes) -> list[bytes]:
    return [line for line in stderr.splitlines() if line.startswith(b"sealtrace:")]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real file system with room for the recording's header and nothing much else."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_disk_full_leaves_the_application_alone(
    tmp_path: Path, keys: KeyFiles, full_disk: Path
) -> None:
    app = write_app(tmp_path / "app", BUSY_APP)
    plain = subprocess.run([PYTHON, str(app)], capture_output=True, check=False)
    rec = record(keys, full_disk / "rec", [PYTHON, str(app)])
    assert (rec.proc.returncode, rec.proc.stdout) == (plain.returncode, plain.stdout) == (
        5, plain.stdout,
    )  # fmt: skip
    lines = _sealtrace_lines(rec.proc.stderr)
    assert len(lines) == 1 and b"recording failed" in lines[0], rec.proc.stderr
    assert b"No space left on device" in lines[0]
    assert rec.proc.stderr.replace(lines[0] + b"\n", b"") == plain.stderr
    # What did reach the disk is honest about it: it opens as incomplete, never as whole.
    proc, _ = replay(keys, full_disk / "rec")
    assert proc.returncode == 4 and b"incomplete" in proc.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_store_leaves_the_application_alone(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(
        tmp_path / "app",
        "import sealtrace.proxy\n"
        f"sealtrace.proxy.start_recording({str(keys.recipient_path)!r}, 's3://nowhere/run-1')\n"
        + BUSY_APP,
    )
    env = {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    plain = subprocess.run(
        [PYTHON, "-c", BUSY_APP], capture_output=True, env=env, check=False, timeout=60
    )
    run = subprocess.run([PYTHON, str(app)], capture_output=True, env=env, check=False, timeout=60)
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout) == (5, plain.stdout)
    lines = _sealtrace_lines(run.stderr)
    assert len(lines) == 1 and b"recording failed" in lines[0], run.stderr


def test_recording_through_s3(tmp_path: Path, keys: KeyFiles, locked_bucket: str) -> None:
    app = write_app(tmp_path / "app", "import time, os\nprint(time.time(), os.urandom(4))\n")
    location = f"s3://{locked_bucket}/acme/run-s3"
    rec = record(keys, location, [PYTHON, str(app)])
    assert rec.proc.returncode == 0 and not _sealtrace_lines(rec.proc.stderr), rec.proc.stderr
    receipt = assert_bit_exact(*replay(keys, location))
    assert receipt["outputs_matched"] >= 1
