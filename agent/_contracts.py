"""What the server and an agent agree on: the assignment task, and how a session's
recording key travels.

The server recovers a run's recording key (KMS unwraps the run's private key, which opens the
recording header's HPKE-wrapped key) and seals it again with HPKE to the public key the
assigned agent made at boot, with the session and run ids bound into `info`. Only that sealed
blob crosses Redis; it opens only with that agent's private key, for that session and run.
The sealing recipe itself is the recorder's (sealtrace.proxy.format, with every other HPKE
recipe): this module names it for the agent and the server and never touches the suite.
"""

from __future__ import annotations

from sealtrace.proxy.format import SESSION_BLOB_SIZE, open_session_key, seal_session_key

__all__ = ["ASSIGNMENT_TASK", "SESSION_BLOB_SIZE", "open_session_key", "seal_session_key"]

# The Celery task an assignment travels as, on the assigned agent's own queue. Its kwargs:
# session_id, run_id, store (s3://bucket/prefix), sealed_key (base64 of the seal_session_key blob),
# process (the run's process the session replays: "" the recorded one, "1" the first it forked).
ASSIGNMENT_TASK = "sealtrace.agent.session"
