"""Key material is held in buffers wiped after use (issue 21, finding 10), in the recorder's
own paths: `sealtrace open` (the identity file's text, its private key, the unwrapped
recording key, the body key) and the sealing writer (its body key).

- a Secret reads all zeros after its `with` block, through every view of it; it never shows
  its bytes, and is never pickled or copied;
- every Secret made while a recording is opened or sealed reads all zeros once that is done
  (the `secrets_made` fixture keeps them alive, so a missing wipe cannot hide behind garbage
  collection), and the recording still opens to its plaintext.

What Python cannot wipe (bytes that cryptography or botocore hand out, the copies their key
objects keep) is listed in docs/platform.md, "Key hygiene"; it is not claimed here.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sealtrace.proxy import LocalDirStore, SealedReader, SealedWriter, TamperedError
from sealtrace.proxy._format import RecordingHeader
from sealtrace.proxy.cli import app
from sealtrace.proxy.format import Secret, unwrap_recording_key

from ..conftest import KeyFiles, wiped

PLAINTEXT = b"recorded events " * 300


def test_a_secret_reads_zeros_after_its_with_block() -> None:
    with Secret.copy_of(b"k" * 32) as key:
        view = key.view()
        assert bytes(view) == b"k" * 32
    assert bytes(view) == bytes(32) and bytes(key.view()) == bytes(32) and len(key) == 32


def test_random_secrets_are_random() -> None:
    first, second = Secret.random(32), Secret.random(32)
    assert any(first.view()) and first.view() != second.view()


def test_a_secret_never_shows_or_copies_its_bytes() -> None:
    key = Secret.copy_of(bytes(range(1, 33)))
    assert repr(key) == "Secret(32 bytes)"
    leaks: list[Callable[[Any], object]] = [pickle.dumps, copy.copy, copy.deepcopy, bytes]
    for leak in leaks:
        with pytest.raises(TypeError):
            leak(key)


def test_negative_control_an_unwiped_secret_is_seen(secrets_made: list[Any]) -> None:
    key = Secret.copy_of(b"k" * 32)
    assert secrets_made == [key] and not wiped(secrets_made)
    key.wipe()
    assert wiped(secrets_made)


def _seal(keys: KeyFiles, directory: Path) -> None:
    with SealedWriter(LocalDirStore(directory), keys.recipient, "run-wipe", chunk_size=512) as w:
        w.write(PLAINTEXT)


def test_sealing_wipes_its_body_key(
    keys: KeyFiles, tmp_path: Path, secrets_made: list[Any]
) -> None:
    _seal(keys, tmp_path / "rec")
    # The body key, and the recording key the writer keeps for forked processes' streams.
    assert [len(secret) for secret in secrets_made] == [32, 32] and wiped(secrets_made)


def test_sealtrace_open_wipes_every_key_it_held(
    keys: KeyFiles, tmp_path: Path, secrets_made: list[Any]
) -> None:
    _seal(keys, tmp_path / "rec")
    secrets_made.clear()
    opened = CliRunner().invoke(app, ["open", "--identity", str(keys.identity_path),
                                      str(tmp_path / "rec")])  # fmt: skip
    assert opened.exit_code == 0 and opened.stdout_bytes == PLAINTEXT, opened.stderr
    # The identity file's text and its key, the recording key, the body key.
    assert [len(secret) for secret in secrets_made] == [256, 32, 32, 32]
    assert wiped(secrets_made)


def test_a_reader_wipes_the_keys_it_makes_even_when_it_then_refuses(
    keys: KeyFiles, tmp_path: Path, secrets_made: list[Any]
) -> None:
    _seal(keys, tmp_path / "rec")
    identity = keys.identity
    secrets_made.clear()
    reader = SealedReader(LocalDirStore(tmp_path / "rec"), identity)
    assert len(secrets_made) == 2 and wiped(secrets_made)  # the recording and body keys
    assert reader.read_all() == PLAINTEXT
    # A recording that is refused (its last byte flipped) leaves nothing behind either.
    segment = tmp_path / "rec" / "seg-000000"
    segment.chmod(0o644)
    data = bytearray(segment.read_bytes())
    data[-1] ^= 1
    segment.write_bytes(bytes(data))
    secrets_made.clear()
    with pytest.raises(TamperedError):
        SealedReader(LocalDirStore(tmp_path / "rec"), identity).read_all()
    assert len(secrets_made) == 2 and wiped(secrets_made)


def test_a_reader_given_the_key_wipes_its_body_key_and_leaves_the_key_to_its_owner(
    keys: KeyFiles, tmp_path: Path, secrets_made: list[Any]
) -> None:
    _seal(keys, tmp_path / "rec")
    header = RecordingHeader.decode((tmp_path / "rec" / "header").read_bytes())
    with unwrap_recording_key(header.wrapped_key, keys.identity, "run-wipe") as key:
        secrets_made.clear()
        reader = SealedReader(LocalDirStore(tmp_path / "rec"), None, recording_key=key)
        assert len(secrets_made) == 1 and wiped(secrets_made)  # the body key
        assert any(key.view())  # the agent's: it wipes it, as the with block does here
    assert not any(key.view())
    assert reader.read_all() == PLAINTEXT
