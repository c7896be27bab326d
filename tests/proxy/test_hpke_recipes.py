"""Every HPKE recipe is the recorder's, in sealtrace.proxy._format, exported as safe operations
through sealtrace.proxy.format:

- a session key sealed to an agent opens with that agent's identity for that session and run,
  and with nothing else (another session, another run, another agent, one flipped bit);
- the session key's `info` is pinned byte for byte (HPKE's output is randomised, so the bound
  `info` is what keeps sealed blobs of one build opening in another);
- no module outside _format touches the HPKE suite or cryptography's hpke module.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sealtrace.agent import _contracts
from sealtrace.proxy import WrongIdentityError
from sealtrace.proxy import _format as format_module
from sealtrace.proxy.format import (
    SESSION_BLOB_SIZE,
    generate_identity,
    open_session_key,
    seal_session_key,
    unwrap_recording_key,
    wrap_recording_key,
)

REPO = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ["proxy", "sandbox", "agent", "server", "bench", "infra"]


STORE, HEADER = "s3://b/acme/run-1", b"\x01" * 80  # the registered store and wrapped key
BOUND = {"session_id": "sess-1", "run_id": "run-1", "store": STORE, "wrapped_key": HEADER}


def test_a_sealed_session_key_opens_for_its_agent_session_and_run() -> None:
    agent, key = generate_identity(), os.urandom(32)
    blob = seal_session_key(key, agent.recipient, **BOUND)  # type: ignore[arg-type]
    assert len(blob) == SESSION_BLOB_SIZE == 80
    with open_session_key(blob, agent, **BOUND) as opened:  # type: ignore[arg-type]
        assert opened.view() == key


@pytest.mark.parametrize("change", ["session", "run", "store", "header", "agent", "bit"])
def test_negative_control_anything_else_does_not_open_it(change: str) -> None:
    """Another session, run or agent; an assignment naming another store; a store holding
    another header than the one registered (a recording forged with the run's public key);
    an altered blob."""
    agent, key = generate_identity(), os.urandom(32)
    blob = seal_session_key(key, agent.recipient, **BOUND)  # type: ignore[arg-type]
    bound: dict[str, object] = dict(BOUND)
    who = agent
    if change == "session":
        bound["session_id"] = "sess-2"
    elif change == "run":
        bound["run_id"] = "run-2"
    elif change == "store":
        bound["store"] = "s3://attacker/acme/run-1"
    elif change == "header":
        bound["wrapped_key"] = b"\x02" * 80
    elif change == "agent":
        who = generate_identity()
    else:
        blob = blob[:-1] + bytes([blob[-1] ^ 0x01])
    with pytest.raises(WrongIdentityError):
        open_session_key(blob, who, **bound)  # type: ignore[arg-type]


def test_the_session_info_is_pinned() -> None:
    import hashlib

    assert format_module.session_info("sess-1", "run-42", "s3://b/r", b"w") == (
        b"sealtrace-session-key-v2\x00"
        + b"\x00\x06\x00\x06\x00\x08"
        + b"sess-1run-42s3://b/r"
        + hashlib.sha256(b"w").digest()
    )
    # The length prefixes keep ("ab", "c") and ("a", "bc") apart.
    assert format_module.session_info("ab", "c", "s", b"") != format_module.session_info(
        "a", "bc", "s", b""
    )


def test_the_recording_key_info_is_pinned() -> None:
    assert format_module.hpke_info("run-42") == (
        b"sealtrace/recording-key" + b"\x00\x01\x00\x06" + b"run-42"
    )


def test_a_session_key_is_not_a_recording_key() -> None:
    # The two recipes bind different `info`: a blob of one never opens as the other.
    agent, key = generate_identity(), os.urandom(32)
    blob = seal_session_key(key, agent.recipient, **BOUND)  # type: ignore[arg-type]
    with pytest.raises(WrongIdentityError):
        unwrap_recording_key(blob, agent, "run-1")
    wrapped = wrap_recording_key(key, agent.recipient, "run-1")
    with pytest.raises(WrongIdentityError):
        open_session_key(wrapped, agent, **BOUND)  # type: ignore[arg-type]


def test_the_agent_contract_is_the_recorders_recipe() -> None:
    assert _contracts.seal_session_key is seal_session_key
    assert _contracts.open_session_key is open_session_key
    assert _contracts.SESSION_BLOB_SIZE == SESSION_BLOB_SIZE


def test_no_module_but_the_format_touches_the_hpke_suite() -> None:
    touching = sorted(
        str(path.relative_to(REPO))
        for folder in SOURCE_DIRS
        for path in (REPO / folder).rglob("*.py")
        if any(
            needle in path.read_text(encoding="utf-8")
            for needle in ("HPKE_SUITE", "primitives.hpke", "primitives import hpke")
        )
    )
    assert touching == ["proxy/_format.py"]
