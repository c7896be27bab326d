"""The recorder trusts a lease only if it came over a channel nobody could rewrite: https,
or plain http to this host. Over plain http to another host, anyone on the path could swap a
lease's public key for their own before the lease pool's MAC is written, and read every run
sealed to it; `record --server` refuses such a URL (exit 2) before anything starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sealtrace.proxy import UsageError
from sealtrace.proxy._platform import check_server_url

from .conftest import SEALTRACE


@pytest.mark.parametrize(
    "url",
    ["https://sealtrace.example", "https://10.0.0.5:8400/", "http://127.0.0.1:8400",
     "http://127.9.9.9", "http://localhost:8400", "http://[::1]:8400"],
)  # fmt: skip
def test_https_and_loopback_http_are_trusted(url: str) -> None:
    assert check_server_url(url) == url


@pytest.mark.parametrize(
    "url",
    ["http://sealtrace.example", "http://10.0.0.5:8400", "http://127.0.0.1.evil.example",
     "ftp://127.0.0.1", "127.0.0.1:8400", "https://", "file:///tmp/x"],
)  # fmt: skip
def test_anything_else_is_refused(url: str) -> None:
    with pytest.raises(UsageError):
        check_server_url(url)


def test_record_refuses_plain_http_to_another_host_before_the_program_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [SEALTRACE, "record", "--server", "http://sealtrace.example:8400", "--store",
         str(tmp_path / "store"), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        env={"PATH": "/usr/bin:/bin", "SEALTRACE_TOKEN": "st_abc_secretsecret"},
        capture_output=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "plain http" in lines[0], lines
    assert b"secretsecret" not in proc.stderr
    assert not marker.exists()
