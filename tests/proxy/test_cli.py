"""The CLI contract: outputs, file modes, one clear error with the right code for bad input."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path

import pytest

from ..conftest import KeyFiles, run_cli, seal_cli

DATA = b"order 1234: total_price=0.00 promo=STAFF100\n" * 50


def _seal(keys: KeyFiles, out: Path, run_id: str = "run-cli") -> None:
    seal_cli(keys, str(out), DATA, run_id=run_id)


def _open_to_file(keys: KeyFiles, tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    return run_cli(
        "open",
        "--identity",
        str(keys.identity_path),
        str(tmp_path / "rec"),
        "--output",
        str(tmp_path / "plain"),
    )


def _one_error(proc: object, code: int, needle: bytes) -> None:
    assert proc.returncode == code, proc.stderr  # type: ignore[attr-defined]
    err: bytes = proc.stderr  # type: ignore[attr-defined]
    assert err.startswith(b"sealtrace: error: ") or err.startswith(b"Usage:"), err
    assert b"Traceback" not in err
    assert needle in err


def test_keygen_writes_a_private_identity_and_a_public_recipient(tmp_path: Path) -> None:
    proc = run_cli("keygen", "--out", str(tmp_path / "k"), "--name", "ops", "--json")
    assert proc.returncode == 0
    info = json.loads(proc.stdout)
    key, pub = Path(info["identity"]), Path(info["recipient"])
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert pub.name == "ops.pub" and info["public_key"] == pub.read_text().strip()
    assert pub.read_text().strip() not in key.read_text()
    secret = key.read_text()
    again = run_cli("keygen", "--out", str(tmp_path / "k"), "--name", "ops")
    _one_error(again, 2, b"refusing to overwrite")
    assert key.read_text() == secret and pub.read_text().strip() == info["public_key"]


def test_open_writes_plaintext_only_where_asked(tmp_path: Path, keys: KeyFiles) -> None:
    _seal(keys, tmp_path / "rec")
    proc = _open_to_file(keys, tmp_path)
    assert proc.returncode == 0 and proc.stdout == b""
    assert (tmp_path / "plain").read_bytes() == DATA
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o600
    again = _open_to_file(keys, tmp_path)
    _one_error(again, 2, b"refusing to overwrite")


def test_a_refused_open_leaves_no_output_file(
    tmp_path: Path, keys: KeyFiles, other_keys: KeyFiles
) -> None:
    _seal(keys, tmp_path / "rec")
    seg = tmp_path / "rec" / "seg-000000"
    seg.chmod(0o644)
    data = bytearray(seg.read_bytes())
    data[-3] ^= 1
    seg.write_bytes(data)
    proc = _open_to_file(keys, tmp_path)
    _one_error(proc, 4, b"failed authentication")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys", "other-keys", "rec"]


def test_inspect_needs_no_key_and_verifies_with_one(tmp_path: Path, keys: KeyFiles) -> None:
    _seal(keys, tmp_path / "rec", run_id="run-inspect")
    plain = json.loads(run_cli("inspect", "--json", str(tmp_path / "rec")).stdout)
    assert plain["run_id"] == "run-inspect" and plain["verified"] is False
    assert plain["completeness"].startswith("claims complete")
    assert plain["segments"][0]["has_final"] is True and plain["alarms"] == []
    verified = json.loads(
        run_cli(
            "inspect", "--json", "--identity", str(keys.identity_path), str(tmp_path / "rec")
        ).stdout
    )
    assert verified["verified"] is True and verified["completeness"].startswith("complete: ")
    assert verified["segments"] == plain["segments"]  # same figures, now authenticated
    text = run_cli("inspect", str(tmp_path / "rec")).stdout.decode()
    assert "run id      run-inspect" in text and "seg-000000" in text


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["open", "--identity", "{missing}", "{rec}"], 2, b"identity file not found"),
        (["open", "--identity", "{recipient}", "{rec}"], 2, b"is not a sealtrace identity file"),
        (["open", "--identity", "{garbled}", "{rec}"], 2, b"must hold 32 key bytes"),
        (["open", "--identity", "{identity}", "{tmp}/nothing-here"], 2, b"no sealtrace recording"),
        (["open", "--identity", "{identity}", "ftp://host/x"], 2, b"unsupported location"),
        (["inspect", "{tmp}/nothing-here"], 2, b"no sealtrace recording"),
        (
            ["seal", "--recipient", "{identity}", "--run-id", "r", "--output", "{tmp}/new"],
            2,
            b"is not a sealtrace recipient file",
        ),
        (
            ["seal", "--recipient", "{recipient}", "--run-id", "", "--output", "{tmp}/new"],
            2,
            b"run id",
        ),
        (
            ["seal", "--recipient", "{recipient}", "--run-id", "r", "--output", "{rec}"],
            2,
            b"already holds a recording",
        ),
        (
            [
                "seal",
                "--recipient",
                "{recipient}",
                "--run-id",
                "r",
                "--output",
                "{tmp}/n",
                "--chunk-size",
                "3",
            ],
            2,
            b"chunk size",
        ),
        (["open", "{rec}"], 2, b"--identity"),
        (["frobnicate"], 2, b"No such command"),
    ],
)
def test_bad_input_is_one_clear_error(
    tmp_path: Path, keys: KeyFiles, args: list[str], code: int, needle: bytes
) -> None:
    _seal(keys, tmp_path / "rec")
    garbled = tmp_path / "garbled.key"
    garbled.write_text("SEALTRACE-IDENTITY-X25519-V1:AAAA\n")
    values = {
        "missing": str(tmp_path / "missing.key"),
        "recipient": str(keys.recipient_path),
        "identity": str(keys.identity_path),
        "garbled": str(garbled),
        "rec": str(tmp_path / "rec"),
        "tmp": str(tmp_path),
    }
    proc = run_cli(*[a.format(**values) for a in args], stdin=b"data")
    _one_error(proc, code, needle)
    assert (tmp_path / "rec" / "header").exists()  # nothing stored was lost
    assert not (tmp_path / "new").exists() and not (tmp_path / "n").exists()
