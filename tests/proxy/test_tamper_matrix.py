"""Every way of altering a stored recording is refused with exit 4 and one line on stderr.

The base recording has three segments of three chunks each, so every region exists more than
once. Each case copies it, applies one alteration, and opens it through the CLI. Whatever the
alteration, stdout may only ever carry a prefix of the true plaintext.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sealtrace.proxy import LocalDirStore, SealedWriter
from sealtrace.proxy._format import CHUNK_PREFIX, SEGMENT_HEADER, TAG_SIZE
from sealtrace.proxy.cli import app

from ..conftest import KeyFiles, run_cli

CHUNK = 64
SEGMENT = SEGMENT_HEADER.size + 3 * (CHUNK_PREFIX.size + CHUNK + TAG_SIZE)
PLAINTEXT = bytes((i * 7 + 3) % 251 for i in range(8 * CHUNK + 10))  # 9 chunks, 3 segments
RUN_ID = "run-tamper-0001"

Mutation = Callable[[Path, Path], None]  # (recording dir, directory of spare recordings)


def _seal(directory: Path, keys: KeyFiles, run_id: str = RUN_ID, data: bytes = PLAINTEXT) -> None:
    with SealedWriter(
        LocalDirStore(directory), keys.recipient, run_id, chunk_size=CHUNK, segment_size=SEGMENT
    ) as writer:
        writer.write(data)


def _rw(path: Path) -> bytearray:
    os.chmod(path, 0o644)
    return bytearray(path.read_bytes())


def flip(name: str, offset: int) -> Mutation:
    def mutate(rec: Path, _: Path) -> None:
        data = _rw(rec / name)
        data[offset] ^= 0x10
        (rec / name).write_bytes(data)

    return mutate


def truncate(name: str, length: int) -> Mutation:
    def mutate(rec: Path, _: Path) -> None:
        data = _rw(rec / name)
        (rec / name).write_bytes(data[:length])

    return mutate


def append(name: str, garbage: bytes) -> Mutation:
    def mutate(rec: Path, _: Path) -> None:
        data = _rw(rec / name)
        (rec / name).write_bytes(data + garbage)

    return mutate


def drop(*names: str) -> Mutation:
    def mutate(rec: Path, _: Path) -> None:
        for name in names:
            (rec / name).unlink()

    return mutate


def copy_over(src: str, dst: str) -> Mutation:
    def mutate(rec: Path, _: Path) -> None:
        if (rec / dst).exists():
            os.chmod(rec / dst, 0o644)
        shutil.copyfile(rec / src, rec / dst)

    return mutate


def swap(a: str, b: str) -> Mutation:
    def mutate(rec: Path, _: Path) -> None:
        (rec / a).rename(rec / "tmp")
        (rec / b).rename(rec / a)
        (rec / "tmp").rename(rec / b)

    return mutate


def splice(spare: str, name: str) -> Mutation:
    """Replace `name` with the same object from another recording in `spares/<spare>`."""

    def mutate(rec: Path, spares: Path) -> None:
        os.chmod(rec / name, 0o644)
        shutil.copyfile(spares / spare / name, rec / name)

    return mutate


def _header_regions() -> dict[str, int]:
    rid = len(RUN_ID)
    enc = 34 + rid
    return {
        "magic": 3,
        "version": 9,
        "kem_id": 11,
        "kdf_id": 13,
        "aead_id": 15,
        "chunk_size": 18,
        "segment_size": 22,
        "created": 28,
        "run_id_length": 33,
        "run_id": 34 + rid // 2,
        "enc": enc + 16,
        "wrapped_key": enc + 32 + 10,
        "wrapped_key_tag": enc + 32 + 32 + 8,
    }


def _segment_regions(chunk_lengths: tuple[int, ...]) -> dict[str, int]:
    regions = {"magic": 2, "version": 9, "index": 13, "first_chunk": 20, "header_digest": 40}
    pos = SEGMENT_HEADER.size
    for chunk, length in enumerate(chunk_lengths):
        regions[f"chunk{chunk}_length"] = pos + 2
        regions[f"chunk{chunk}_flags"] = pos + 4
        regions[f"chunk{chunk}_body"] = pos + CHUNK_PREFIX.size + length // 2
        regions[f"chunk{chunk}_tag"] = pos + CHUNK_PREFIX.size + length + TAG_SIZE // 2
        pos += CHUNK_PREFIX.size + length + TAG_SIZE
    return regions


def _cases() -> dict[str, Mutation]:
    cases: dict[str, Mutation] = {}
    for region, offset in _header_regions().items():
        cases[f"flip header {region}"] = flip("header", offset)
    segments = ["seg-000000", "seg-000001", "seg-000002"]
    record = CHUNK_PREFIX.size + CHUNK + TAG_SIZE
    for seg in segments:
        lengths = (CHUNK, CHUNK, 10) if seg == "seg-000002" else (CHUNK, CHUNK, CHUNK)
        for region, offset in _segment_regions(lengths).items():
            cases[f"flip {seg} {region}"] = flip(seg, offset)
        cases[f"truncate {seg} inside its header"] = truncate(seg, SEGMENT_HEADER.size - 5)
        for k in range(3):
            cut = SEGMENT_HEADER.size + k * record
            if k:
                cases[f"truncate {seg} after chunk {k - 1}"] = truncate(seg, cut)
            cases[f"truncate {seg} inside chunk {k} header"] = truncate(seg, cut + 2)
            cases[f"truncate {seg} inside chunk {k} body"] = truncate(
                seg, cut + CHUNK_PREFIX.size + 7
            )
    cases["truncate header"] = truncate("header", 40)
    cases["drop seg-000002 (tail: incomplete)"] = drop("seg-000002")
    cases["drop seg-000001 and seg-000002 (tail: incomplete)"] = drop("seg-000001", "seg-000002")
    cases["drop every segment (incomplete)"] = drop(*segments)
    cases["drop seg-000001"] = drop("seg-000001")
    cases["drop seg-000000"] = drop("seg-000000")
    cases["drop header"] = drop("header")
    cases["duplicate seg-000000 over seg-000001"] = copy_over("seg-000000", "seg-000001")
    cases["duplicate seg-000001 as seg-000003"] = copy_over("seg-000001", "seg-000003")
    cases["duplicate seg-000002 as seg-000003"] = copy_over("seg-000002", "seg-000003")
    cases["reorder seg-000000 and seg-000001"] = swap("seg-000000", "seg-000001")
    cases["reorder seg-000001 and seg-000002"] = swap("seg-000001", "seg-000002")
    cases["splice seg-000001 from a twin recording (same key, run, data)"] = splice(
        "twin", "seg-000001"
    )
    cases["splice seg-000001 from a recording to other keys"] = splice("foreign", "seg-000001")
    cases["splice header from a twin recording"] = splice("twin", "header")
    cases["splice header from a recording to other keys"] = splice("foreign", "header")
    cases["trailing garbage after the final segment"] = append("seg-000002", b"\x00" * 9)
    cases["trailing garbage after a middle segment"] = append("seg-000001", b"garbage")
    cases["trailing garbage after the header"] = append("header", b"\x01")
    cases["extra garbage segment after the final one"] = lambda rec, _: (
        rec / "seg-000003"
    ).write_bytes(b"x" * 80)
    return cases


CASES = _cases()


@pytest.fixture
def recordings(tmp_path: Path, keys: KeyFiles, other_keys: KeyFiles) -> tuple[Path, Path]:
    base = tmp_path / "base"
    _seal(base, keys)
    spares = tmp_path / "spares"
    _seal(spares / "twin", keys)
    _seal(spares / "foreign", other_keys)
    return base, spares


def _altered(case: str, recordings: tuple[Path, Path], tmp_path: Path) -> Path:
    """A copy of the base recording with one alteration applied."""
    base, spares = recordings
    rec = tmp_path / "case"
    shutil.copytree(base, rec)
    CASES[case](rec, spares)
    return rec


def _assert_refused(exit_code: int, stdout: bytes, stderr: str) -> None:
    assert exit_code == 4, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("sealtrace: error:")]
    assert len(errors) == 1, stderr
    assert PLAINTEXT.startswith(stdout), "a refused recording must never yield other plaintext"


@pytest.mark.parametrize("case", list(CASES))
def test_every_alteration_is_refused(
    case: str, recordings: tuple[Path, Path], keys: KeyFiles, tmp_path: Path
) -> None:
    rec = _altered(case, recordings, tmp_path)
    result = CliRunner().invoke(app, ["open", "--identity", str(keys.identity_path), str(rec)])
    _assert_refused(result.exit_code, result.stdout_bytes, result.stderr)


def test_negative_control_the_untouched_recording_opens(
    recordings: tuple[Path, Path], keys: KeyFiles
) -> None:
    base, _ = recordings
    result = CliRunner().invoke(app, ["open", "--identity", str(keys.identity_path), str(base)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == PLAINTEXT


def test_wrong_identity_is_refused(recordings: tuple[Path, Path], other_keys: KeyFiles) -> None:
    base, _ = recordings
    result = CliRunner().invoke(
        app, ["open", "--identity", str(other_keys.identity_path), str(base)]
    )
    _assert_refused(result.exit_code, result.stdout_bytes, result.stderr)
    assert result.stdout_bytes == b""
    assert "wrong identity" in result.stderr


def test_wrong_run_id_is_refused(recordings: tuple[Path, Path], keys: KeyFiles) -> None:
    base, _ = recordings
    args = ["open", "--identity", str(keys.identity_path), "--run-id", "run-other", str(base)]
    result = CliRunner().invoke(app, args)
    _assert_refused(result.exit_code, result.stdout_bytes, result.stderr)
    assert result.stdout_bytes == b""
    ok = CliRunner().invoke(app, [*args[:3], "--run-id", RUN_ID, str(base)])
    assert ok.exit_code == 0 and ok.stdout_bytes == PLAINTEXT


def test_a_missing_tail_is_reported_as_incomplete_and_allowed_only_on_request(
    recordings: tuple[Path, Path], keys: KeyFiles, tmp_path: Path
) -> None:
    base, spares = recordings
    rec = tmp_path / "cut"
    shutil.copytree(base, rec)
    drop("seg-000002")(rec, spares)
    refused = CliRunner().invoke(app, ["open", "--identity", str(keys.identity_path), str(rec)])
    assert refused.exit_code == 4 and "incomplete after chunk 5" in refused.stderr
    allowed = CliRunner().invoke(
        app, ["open", "--allow-incomplete", "--identity", str(keys.identity_path), str(rec)]
    )
    assert allowed.exit_code == 0
    assert allowed.stdout_bytes == PLAINTEXT[: 6 * CHUNK]
    assert "incomplete after chunk 5" in allowed.stderr
    inspected = CliRunner().invoke(app, ["inspect", str(rec)])
    assert "incomplete (no final chunk)" in inspected.stdout


@pytest.mark.parametrize(
    "case",
    [
        "flip seg-000001 chunk1_body",
        "truncate seg-000002 after chunk 1",
        "drop seg-000002 (tail: incomplete)",
    ],
)
def test_the_real_console_script_refuses_without_a_traceback(
    case: str, recordings: tuple[Path, Path], keys: KeyFiles, tmp_path: Path
) -> None:
    rec = _altered(case, recordings, tmp_path)
    proc = run_cli("open", "--identity", str(keys.identity_path), str(rec))
    _assert_refused(proc.returncode, proc.stdout, proc.stderr.decode())
