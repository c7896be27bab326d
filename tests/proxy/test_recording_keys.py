"""Each recording has its own key, and the key is bound to its run.

- a fresh random recording key per recording: two recordings sealed to one recipient, for one
  run id, with the same plaintext, hold different recording keys (so different body keys and
  different ciphertext), not only different HPKE encapsulations;
- the run id is bound into the wrapped key's HPKE `info`: a header whose run id was changed,
  or a wrapped key moved into another run's header, fails at the unwrapping of the key, and
  `sealtrace open` says so in one line with exit 4. (Without the binding such a header still
  fails, later, because the body key and the AAD bind the header digest: the tests check that
  it is the unwrapping that refuses, which is what the binding adds.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sealtrace.proxy import LocalDirStore, SealedWriter, WrongIdentityError
from sealtrace.proxy._format import RecordingHeader, unwrap_recording_key

from ..conftest import KeyFiles, run_cli

PLAINTEXT = b"the same events, twice " * 50
UNWRAP_REFUSED = "cannot unwrap the recording key"


def _seal(directory: Path, keys: KeyFiles, run_id: str) -> RecordingHeader:
    with SealedWriter(LocalDirStore(directory), keys.recipient, run_id, chunk_size=256) as writer:
        writer.write(PLAINTEXT)
    return RecordingHeader.decode((directory / "header").read_bytes())


def test_every_recording_has_a_fresh_recording_key(keys: KeyFiles, tmp_path: Path) -> None:
    first = _seal(tmp_path / "a", keys, "run-same")
    second = _seal(tmp_path / "b", keys, "run-same")
    identity = keys.identity
    key_a = unwrap_recording_key(first.wrapped_key, identity, "run-same")
    key_b = unwrap_recording_key(second.wrapped_key, identity, "run-same")
    assert len(key_a) == len(key_b) == 32
    same = key_a.view() == key_b.view()  # compared here: a failing assert would print them
    assert not same, "two recordings were sealed under one recording key"
    assert first.wrapped_key != second.wrapped_key
    segment_a = (tmp_path / "a" / "seg-000000").read_bytes()
    segment_b = (tmp_path / "b" / "seg-000000").read_bytes()
    assert segment_a[-64:] != segment_b[-64:]
    # Control: each opens, to the same plaintext.
    for name in ("a", "b"):
        opened = run_cli("open", "--identity", str(keys.identity_path), str(tmp_path / name))
        assert opened.returncode == 0 and opened.stdout == PLAINTEXT, opened.stderr


def _rewrite_header(directory: Path, header: RecordingHeader) -> None:
    path = directory / "header"
    path.chmod(0o644)
    path.write_bytes(header.encode())


def _refused_at_unwrap(directory: Path, keys: KeyFiles) -> None:
    opened = run_cli("open", "--identity", str(keys.identity_path), str(directory))
    lines = opened.stderr.decode().splitlines()
    assert opened.returncode == 4, lines
    assert len(lines) == 1 and UNWRAP_REFUSED in lines[0], lines
    assert opened.stdout == b""


def test_a_header_whose_run_id_was_changed_does_not_unwrap(keys: KeyFiles, tmp_path: Path) -> None:
    header = _seal(tmp_path / "rec", keys, "run-0001")
    # Same length, so the header still parses: only the run id differs.
    _rewrite_header(tmp_path / "rec", RecordingHeader(
        run_id="run-0002", chunk_size=header.chunk_size, segment_size=header.segment_size,
        created_unix_ms=header.created_unix_ms, wrapped_key=header.wrapped_key,
    ))  # fmt: skip
    _refused_at_unwrap(tmp_path / "rec", keys)
    with pytest.raises(WrongIdentityError):
        unwrap_recording_key(header.wrapped_key, keys.identity, "run-0002")


def test_a_wrapped_key_moved_to_another_runs_header_does_not_unwrap(
    keys: KeyFiles, tmp_path: Path
) -> None:
    mine = _seal(tmp_path / "mine", keys, "run-mine")
    theirs = _seal(tmp_path / "theirs", keys, "run-theirs")
    # Their recording, with my run's wrapped key (sealed to the same recipient) in its header.
    moved = RecordingHeader(
        run_id=theirs.run_id, chunk_size=theirs.chunk_size, segment_size=theirs.segment_size,
        created_unix_ms=theirs.created_unix_ms, wrapped_key=mine.wrapped_key,
    )  # fmt: skip
    _rewrite_header(tmp_path / "theirs", moved)
    _refused_at_unwrap(tmp_path / "theirs", keys)
    # Control: the key unwraps for the run it was wrapped for, and both recordings were whole.
    assert len(unwrap_recording_key(mine.wrapped_key, keys.identity, "run-mine")) == 32
    opened = run_cli("open", "--identity", str(keys.identity_path), str(tmp_path / "mine"))
    assert opened.returncode == 0 and opened.stdout == PLAINTEXT
