"""What the server and an agent agree on: the assignment task, and how a session's
recording key travels.

The server recovers a run's recording key (KMS unwraps the run's private key, which opens the
recording header's HPKE-wrapped key) and seals it again with HPKE to the public key the
assigned agent made at boot, with the session and run ids bound into `info`. Only that sealed
blob crosses Redis; it opens only with that agent's private key, for that session and run.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag

from sealtrace.proxy._errors import WrongIdentityError
from sealtrace.proxy._format import HPKE_SUITE, RECORDING_KEY_SIZE
from sealtrace.proxy._keys import Identity, Recipient

__all__ = ["ASSIGNMENT_TASK", "SESSION_BLOB_SIZE", "open_session_key", "seal_session_key"]

# The Celery task an assignment travels as, on the assigned agent's own queue. Its kwargs:
# session_id, run_id, store (s3://bucket/prefix), sealed_key (base64 of the blob below).
ASSIGNMENT_TASK = "sealtrace.agent.session"

_LABEL = b"sealtrace-session-key-v1\x00"
SESSION_BLOB_SIZE = 32 + RECORDING_KEY_SIZE + 16  # enc || ciphertext || tag


def _info(session_id: str, run_id: str) -> bytes:
    sid, rid = session_id.encode(), run_id.encode()
    return _LABEL + struct.pack(">HH", len(sid), len(rid)) + sid + rid


def seal_session_key(
    recording_key: bytes, agent: Recipient, *, session_id: str, run_id: str
) -> bytes:
    if len(recording_key) != RECORDING_KEY_SIZE:
        raise ValueError("a recording key is 32 bytes")
    return HPKE_SUITE.encrypt(recording_key, agent.public_key, info=_info(session_id, run_id))


def open_session_key(blob: bytes, agent: Identity, *, session_id: str, run_id: str) -> bytes:
    """The recording key, or WrongIdentityError (another agent's blob, another session's or
    run's, or altered)."""
    try:
        key = HPKE_SUITE.decrypt(blob, agent.private_key, info=_info(session_id, run_id))
    except (InvalidTag, ValueError):
        raise WrongIdentityError(
            "cannot open the session key: not this agent's, not this session's, or altered"
        ) from None
    if len(key) != RECORDING_KEY_SIZE:
        raise WrongIdentityError("the session key has the wrong length")
    return key
