"""What the agent can show of a sandboxed answer: only values the recording holds, matched by
their keyed digests (agent/_dictionary.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sealtrace.agent._dictionary import Dictionary
from sealtrace.sandbox import canonical_bytes, keyed_digest, load_recording, summarize

from ..conftest import KeyFiles
from ..sandbox.replaying import PYTHON, record, write_app

pytestmark = pytest.mark.integration

# Sends a body it computed (no constant of its source) whole, and reads back only its first
# four bytes: the body is an output of the recording, never an input.
SENDS = """
import json
import socket

a, b = socket.socketpair()
a.sendall(json.dumps({"total": round(2 * 9.99, 2)}).encode())
print(b.recv(4))
"""


def _digest(key: bytes, value: object) -> str:
    summary = summarize(value)
    return keyed_digest(key, summary["type"], canonical_bytes(value, summary["repr"]))


def test_what_the_program_sent_is_shown_and_what_it_never_held_is_not(
    tmp_path: Path, keys: KeyFiles
) -> None:
    app = write_app(tmp_path / "app", SENDS)
    recorded = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    _data, parsed = load_recording(str(recorded.location), keys.identity)
    key = os.urandom(32)
    dictionary = Dictionary(memoryview(key), parsed)
    assert _digest(key, b'{"total": 19.98}') in dictionary.values  # the body sent
    assert _digest(key, b'{"to') in dictionary.values  # the part read back (an input)
    assert _digest(key, b'{"total": 20.98}') not in dictionary.values  # never in the run
    # Keyed: another session's key matches nothing.
    assert _digest(os.urandom(32), b'{"total": 19.98}') not in dictionary.values
