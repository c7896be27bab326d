"""Platform cost: from the open-session API call to the first answered question, and how many
key leases and session opens the server does per second.

    .venv/bin/python bench/session.py [--quick]     (as root, after infra/local/podman-setup.sh)

Runs the local stack (infra/local/stack.py: Redis, moto's S3 and KMS, the server on SQLite),
records the pricing job through it, then:

- open → first answer: an idle agent waiting, the time from POST /v1/sessions to the answer
  of a trace (polling the session until ready in between); median of 10 (3 with --quick).
  Side by side, the same trace in-process on the decrypted recording (the baseline: what the
  platform adds is the agent, S3, the container and the relay).
- key leases per second: POST /v1/keys/lease one key at a time, KMS wrapping included as
  the pool refills.
- session opens per second: POST /v1/sessions with idle agents registered but no worker
  behind them, so it measures the server's part: KMS unwrap, HPKE re-seal, the database and
  the Redis publish.

Prints a table and writes bench/results/session.json.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import machine

from sealtrace.sandbox.questions import Trace

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results" / "session.json"
QUESTION = {"kind": "trace", "at": "routes/orders.py:4", "var": "order.total_price", "depth": 12}


def _stack_module() -> Any:
    spec = importlib.util.spec_from_file_location("stack", REPO / "infra" / "local" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _in_process(stack: Any, run_id: str) -> float:
    """The same trace on the decrypted recording, in this process's replay (the baseline)."""
    import sqlite3

    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from sealtrace.proxy import Identity
    from sealtrace.sandbox import Inquiry, load_recording

    with sqlite3.connect(stack.db) as conn:
        wrapped, tenant, store = conn.execute(
            "SELECT wrapped_private_key, tenant_id, store FROM runs WHERE id = ?", (run_id,)
        ).fetchone()
    conn.close()
    context = {"tenant": str(tenant), "run": run_id, "purpose": "run-private-key"}
    private = stack.aws_client("kms").decrypt(CiphertextBlob=wrapped,
                                              EncryptionContext=context)["Plaintext"]  # fmt: skip
    identity = Identity(X25519PrivateKey.from_private_bytes(private))
    saved = {k: os.environ.get(k) for k in stack.aws}
    os.environ.update(stack.aws)
    try:
        started = time.perf_counter()
        data, parsed = load_recording(store, identity)
        Inquiry(data, parsed).trace(Trace(at=QUESTION["at"], var=QUESTION["var"], depth=12))
        return time.perf_counter() - started
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> None:
    quick = "--quick" in sys.argv
    repeats = 3 if quick else 10
    stack_module = _stack_module()
    work = Path(tempfile.mkdtemp(prefix="sealtrace-bench-session-"))
    with stack_module.Stack(work, supervise=False) as stack:
        proc, run_id = stack.record_story()
        assert proc.returncode == 0 and run_id, proc.stderr.decode()
        token = stack.tokens["ada"]
        starts, in_process = [], []
        for _ in range(repeats):
            agent = stack.start_agent()
            started = time.perf_counter()
            session_id = stack.open_session("ada", run_id)
            code, doc = stack.request("POST", f"/v1/sessions/{session_id}/queries", token,
                                      QUESTION)  # fmt: skip
            starts.append(time.perf_counter() - started)
            assert code == 200 and doc["query"]["value"]["repr"] == "0.0", doc
            stack.request("POST", f"/v1/sessions/{session_id}/close", token)
            agent.wait(timeout=60)
            in_process.append(_in_process(stack, run_id))
        leases = 200 if not quick else 50
        started = time.perf_counter()
        for _ in range(leases):
            code, _ = stack.request("POST", "/v1/keys/lease", stack.tokens["record"], {"count": 1})
            assert code == 200
        lease_rate = leases / (time.perf_counter() - started)
        opens = 50 if not quick else 10
        for _ in range(opens):  # idle agents with no worker behind them: the server's part
            code, minted = stack.request("POST", "/v1/agents/enrollments",
                                         stack.tokens["launcher"], {})  # fmt: skip
            assert code == 201, minted
            key = base64.b64encode(os.urandom(32)).decode()
            code, _ = stack.request("POST", "/v1/agents", minted["enrollment"],
                                    {"public_key": key})  # fmt: skip
            assert code == 201
        started = time.perf_counter()
        for _ in range(opens):
            code, got = stack.request("POST", "/v1/sessions", token, {"run_id": run_id})
            assert code == 201, got
        open_rate = opens / (time.perf_counter() - started)
    result = {
        "machine": machine(),
        "repeats": repeats,
        "open_to_first_answer_s": statistics.median(starts),
        "in_process_answer_s": statistics.median(in_process),
        "key_leases_per_s": lease_rate,
        "session_opens_per_s": open_rate,
    }
    first, plain = result["open_to_first_answer_s"], result["in_process_answer_s"]
    print(f"open session → first answer: {first * 1000:.0f} ms "
          f"(the same trace in-process: {plain * 1000:.0f} ms)")  # fmt: skip
    print(f"key leases: {lease_rate:.0f}/s (one key per call, KMS wrapping as the pool refills)")
    print(f"session opens: {open_rate:.0f}/s (KMS unwrap, HPKE re-seal, database, Redis)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
