"""The platform end to end: the £0.00 story through the server, with real Redis, real Celery
agent processes, moto's S3 and KMS, and rootless Podman.

A recorder leases a key, records the pricing job into S3 (Object Lock) and registers the run;
an on-call user opens a session over HTTP, follows the three provenance jumps to STAFF100,
and closes it. Afterwards:

- the agent process has exited, and left nothing on its tmpfs;
- neither the recording key nor recording plaintext is in any Redis key or queued message,
  in the server's database, or in the server's and agent's logs;
- a second session gets a new agent and a different sealed key;
- a user of another tenant gets 404; a record token reads nothing back; an auditor cannot
  open a session (the role table says so);
- every agent enrolled with its own one-time enrollment: what an agent process holds (its
  environment and command line) has no launcher token, and its enrollment enrolls nothing
  more; a rogue agent gets no session; an agent whose credential is revoked exits.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import REPO, _free_port
from ..sandbox.test_provenance_story import _call, _find
from ._stack import Platform

pytestmark = [pytest.mark.e2e, pytest.mark.podman]

APP = REPO / "examples" / "pricing"
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))
SECRET = "e2e-secret-" + "s" * 24


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory,
    podman_service: tuple[Any, Any, str],
    replay_image: str,
) -> Iterator[Any]:
    """The local stack without its supervisor (the tests start agents themselves); faults
    show fast: an agent silent for 5 s is gone, an assignment not taken up in 20 s failed."""
    settings = {"SEALTRACE_SERVER_AGENT_SILENCE": "5", "SEALTRACE_SERVER_ASSIGN_TIMEOUT": "20"}
    with Platform(tmp_path_factory.mktemp("platform"), podman_socket=podman_service[2],
                  supervise=False, server_env=settings) as found:  # fmt: skip
        yield found


def _newest_run(p: Any) -> dict[str, Any]:
    code, runs = p.request("GET", "/v1/runs", p.tokens["ada"])
    assert code == 200 and runs, runs
    return dict(runs[0])


def _record_story(p: Any) -> str:
    """The pricing job recorded through the server into S3; its inputs gone afterwards."""
    proc, run_id = p.record_story()
    assert proc.returncode == 0 and b'"total_price": 0.0' in proc.stdout, proc.stderr.decode()
    assert b"sealtrace" not in proc.stderr, proc.stderr.decode()
    run = _newest_run(p)
    assert run["run_id"] == run_id and run["status"] == "complete", run
    assert run["service"] == "checkout" and run["exit_status"] == 0
    assert run["store"] == f"s3://{p.bucket}/acme/{run_id}"
    return str(run_id)


class RedisTap:
    """Everything sent to Redis while it runs (MONITOR), for the leak checks."""

    def __init__(self, url: str) -> None:
        import redis

        self.url = url
        self.client = redis.Redis.from_url(url, socket_timeout=None)
        self.seen: list[bytes] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stop = False

    def _run(self) -> None:
        with self.client.monitor() as monitor:
            for command in monitor.listen():
                self.seen.append(str(command.get("command", "")).encode())
                if self._stop:
                    return

    def __enter__(self) -> RedisTap:
        self._thread.start()
        time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        import redis

        self._stop = True
        with redis.Redis.from_url(self.url) as other:
            other.ping()  # a command, so the monitor wakes up and sees the stop
        self._thread.join(timeout=5)
        self.client.close()

    def sealed_keys(self) -> list[bytes]:
        """The sealed session keys in the assignments that crossed Redis."""
        found = []
        for line in self.seen:
            for chunk in line.split(b'"'):
                with contextlib.suppress(ValueError):
                    body = json.loads(base64.b64decode(chunk, validate=True))
                    if isinstance(body, list) and len(body) >= 2 and "sealed_key" in body[1]:
                        sealed = base64.b64decode(body[1]["sealed_key"])
                        if sealed not in found:  # a message shows again once taken (unacked)
                            found.append(sealed)
        return found


def _recording_key(p: Any, run_id: str) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from sealtrace.proxy import Identity
    from sealtrace.proxy._format import unwrap_recording_key

    with sqlite3.connect(p.db) as conn:
        wrapped_private, tenant, wrapped_recording = conn.execute(
            "SELECT wrapped_private_key, tenant_id, wrapped_recording_key FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
    conn.close()
    kms = p.aws_client("kms")
    context = {"tenant": str(tenant), "run": run_id, "purpose": "run-private-key"}
    private = kms.decrypt(CiphertextBlob=wrapped_private, EncryptionContext=context)["Plaintext"]
    identity = Identity(X25519PrivateKey.from_private_bytes(private))
    with unwrap_recording_key(bytes(wrapped_recording), identity, run_id) as key:
        return bytes(key.view())  # a copy the test looks for everywhere


def _session_dirs(*agents: subprocess.Popen[bytes]) -> set[str]:
    """The session directories on /dev/shm; with `agents`, only theirs (the name carries the
    making process's pid): other sealtrace processes on a shared host make their own."""
    found = {name for name in os.listdir("/dev/shm") if name.startswith("sealtrace-")}
    if agents:
        found = {name for name in found if any(f"-{a.pid}-" in name for a in agents)}
    return found


@pytest.fixture(scope="module")
def story_run(platform: Any) -> str:
    return _record_story(platform)


def test_the_story_through_the_platform(platform: Any, story_run: str, tmp_path: Path) -> None:
    p = platform
    run_id = story_run
    before_shm = _session_dirs()
    agent = p.start_agent()
    agent_log = p.logs[-1]
    with RedisTap(p.redis.url) as tap:
        session_id = p.open_session("ada", run_id)
        code, doc = p.request("POST", f"/v1/sessions/{session_id}/queries", p.tokens["ada"],
                             {"kind": "trace", "at": "routes/orders.py:4",
                              "var": "order.total_price", "depth": 12})  # fmt: skip
        assert code == 200, doc
        # The three jumps: the £0.00 total, the discount line, the STAFF100 promotions read.
        assert doc["query"]["value"]["repr"] == "0.0"
        product = _find(doc["root"], op="BINARY_OP *")
        assert "49.99" in {n["value"]["repr"] for n in product["inputs"]}
        read = _find(doc["root"], origin=lambda n: _call(n) == "sqlite3.Cursor.fetchone")
        assert read["value"]["repr"] == "(100,)"
        code, stack = p.request("POST", f"/v1/sessions/{session_id}/queries",
                               p.tokens["ada"], {"kind": "inspect-stack", "at": "end"})  # fmt: skip
        assert code == 200 and stack["frames"][0]["function"] == "<module>", stack
        code, bad = p.request("POST", f"/v1/sessions/{session_id}/queries",
                             p.tokens["ada"], {"kind": "trace", "at": "nowhere.py:1",
                                               "var": "x"})  # fmt: skip
        assert code == 422, bad
        # Forward from the promotions read: it reaches the pricing code and the response.
        source = {"kind": "flows", "from": f"event:{read['origin']['event']}"}
        code, flows = p.request("POST", f"/v1/sessions/{session_id}/queries", p.tokens["ada"],
                                source)  # fmt: skip
        assert code == 200, flows
        assert any(loc["function"] == "calculate_total" for loc in flows["locations"]), flows
        assert flows["outputs"], flows
        # The run did not crash: the crash state is a clear 422, not a hang.
        code, crash = p.request("POST", f"/v1/sessions/{session_id}/queries", p.tokens["ada"],
                                {"kind": "inspect-stack", "at": "crash"})  # fmt: skip
        assert code == 422, crash
        # Another tenant's user, a record token, and an auditor.
        assert p.request("GET", f"/v1/sessions/{session_id}", p.tokens["gil"])[0] == 404
        assert p.request("POST", "/v1/sessions", p.tokens["gil"],
                        {"run_id": run_id})[0] == 404  # fmt: skip
        assert p.request("GET", "/v1/runs", p.tokens["record"])[0] == 403
        assert p.request("GET", f"/v1/runs/{run_id}", p.tokens["record"])[0] == 403
        assert p.request("POST", "/v1/sessions", p.tokens["aud"],
                        {"run_id": run_id})[0] == 403  # fmt: skip
        code, closed = p.request("POST", f"/v1/sessions/{session_id}/close",
                                p.tokens["ada"])  # fmt: skip
        assert code == 200 and closed["status"] == "closed"
        assert agent.wait(timeout=60) == 0  # one session, then the agent is gone
        assert b"agent: session closed" in agent_log.read_bytes()
        # A second session: a new agent, a different sealed key.
        p.start_agent()
        second = p.open_session("ada", run_id)
        p.request("POST", f"/v1/sessions/{second}/close", p.tokens["ada"])
        assert p.agents[-1].wait(timeout=60) == 0
    with sqlite3.connect(p.db) as conn:
        agents = [row[0] for row in conn.execute(
            "SELECT agent_id FROM sessions WHERE id IN (?, ?)", (session_id, second))]  # fmt: skip
    conn.close()
    assert len(set(agents)) == 2
    sealed = tap.sealed_keys()
    assert len(sealed) == 2 and sealed[0] != sealed[1]
    # What must not be anywhere: the recording key, in any form, and recording plaintext.
    key = _recording_key(p, run_id)
    secrets = [key, key.hex().encode(), base64.b64encode(key), base64.urlsafe_b64encode(key),
               b"STAFF100", b"MUG-01"]  # fmt: skip
    import redis

    store = redis.Redis.from_url(p.redis.url)
    redis_dump = b"".join(tap.seen) + b"".join((store.dump(k) or b"") + k for k in store.keys("*"))
    places = {"redis": redis_dump, "database": p.db.read_bytes()}
    places.update({str(log): log.read_bytes() for log in p.logs})
    # Every file the platform wrote (its logs, database, Redis directory, the lease pool)
    # and everything on the agents' tmpfs.
    for root in (p.work, Path("/dev/shm")):
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file():
                    places[str(path)] = path.read_bytes()
    for where, content in places.items():
        for secret in secrets:
            assert secret not in content, f"{secret[:12]!r} found in {where}"
    assert b"sealed_key" in redis_dump  # control: the tap saw the assignments
    # The command-line administration is audited too.
    code, log = p.request("GET", "/v1/audit?after=0&limit=1000", p.tokens["aud"])
    assert {"tenant.create", "user.create", "token.create"} <= {e["action"] for e in log}
    assert not _session_dirs(*p.agents) - before_shm  # the agents wiped their tmpfs


BUSY = "import sys\nprint('working', sum(range(10)))\nsys.exit(5)\n"


def test_without_a_server_the_program_runs_unrecorded(platform: Any, tmp_path: Path) -> None:
    app = tmp_path / "busy.py"
    app.write_text(BUSY)
    plain = subprocess.run([sys.executable, str(app)], capture_output=True, check=False)
    nowhere = f"http://127.0.0.1:{_free_port()}"
    for attempt in range(2):
        started = time.monotonic()
        run = platform.record([sys.executable, str(app)], server=nowhere)
        assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout) == (5, plain.stdout)
        lines = [line for line in run.stderr.splitlines() if b"sealtrace" in line]
        assert len(lines) == 1 and b"not recording this run" in lines[0], run.stderr
        if attempt:  # backing off: the server is not even asked
            assert b"not asking again yet" in lines[0]
            assert time.monotonic() - started < 10
    # Control: with the server, the same program is recorded.
    recorded = platform.record([sys.executable, str(app)])
    assert recorded.returncode == 5 and b"sealtrace" not in recorded.stderr, recorded.stderr


def test_an_unreachable_store_leaves_the_program_alone_and_fails_the_run(
    platform: Any, tmp_path: Path
) -> None:
    app = tmp_path / "busy.py"
    app.write_text(BUSY)
    plain = subprocess.run([sys.executable, str(app)], capture_output=True, check=False)
    down = f"http://127.0.0.1:{_free_port()}"
    store = f"s3://{platform.bucket}/acme"  # told, rather than the server's choice
    run = platform.record([sys.executable, str(app)], store=store, AWS_ENDPOINT_URL=down,
                          AWS_MAX_ATTEMPTS="1")  # fmt: skip
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout)
    lines = [line for line in run.stderr.splitlines() if b"sealtrace" in line]
    assert len(lines) == 1 and b"recording failed" in lines[0], run.stderr
    newest = _newest_run(platform)
    assert newest["status"] == "failed" and newest["exit_status"] == 5, newest


def _ask_trace(p: Any, session_id: str) -> tuple[int, Any]:
    question = {"kind": "trace", "at": "routes/orders.py:4", "var": "order.total_price"}
    return p.request("POST", f"/v1/sessions/{session_id}/queries", p.tokens["ada"],
                    question)  # fmt: skip


def _works(p: Any, run_id: str, work: Path) -> None:
    """A fresh agent serves a fresh session to the end."""
    agent = p.start_agent()
    session_id = p.open_session("ada", run_id)
    code, doc = _ask_trace(p, session_id)
    assert code == 200 and doc["query"]["value"]["repr"] == "0.0", doc
    p.request("POST", f"/v1/sessions/{session_id}/close", p.tokens["ada"])
    assert agent.wait(timeout=60) == 0


def _status(p: Any, session_id: str) -> dict[str, Any]:
    code, found = p.request("GET", f"/v1/sessions/{session_id}", p.tokens["ada"])
    assert code == 200, found
    return dict(found)


@pytest.mark.alone
def test_an_agent_killed_mid_session_fails_it_and_the_next_works(
    platform: Any, story_run: str, tmp_path: Path
) -> None:
    import signal

    p = platform
    agent = p.start_agent()
    session_id = p.open_session("ada", story_run)
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    code, why = _ask_trace(p, session_id)  # the agent no longer polls: 5 s of silence
    assert code == 502 and "stopped answering" in why["detail"], why
    found = _status(p, session_id)
    assert found["status"] == "failed" and "stopped answering" in found["detail"]
    assert _ask_trace(p, session_id)[0] == 409  # a failed session answers nothing more
    # Its container outlived it; the next agent's boot removes it.
    from podman import PodmanClient

    client = PodmanClient(base_url=p.podman_socket)
    orphans = [c for c in client.containers.list(all=True, filters={"label": "sealtrace.agent"})
               if c.labels["sealtrace.agent"].endswith(f":{agent.pid}")]  # fmt: skip
    assert orphans, "the killed agent's container should still be there"
    _works(p, story_run, tmp_path)
    left = [c for c in client.containers.list(all=True, filters={"label": "sealtrace.agent"})
            if c.labels["sealtrace.agent"].endswith(f":{agent.pid}")]  # fmt: skip
    client.close()
    assert not left
    assert not [d for d in os.listdir("/dev/shm") if f"-{agent.pid}-" in d]


def test_redis_restarted_fails_what_was_in_flight_and_new_sessions_work(
    platform: Any, story_run: str
) -> None:
    p = platform
    # An agent that registered but consumes nothing holds the assignment in Redis (a real
    # one blocked in BRPOP would have taken it off Redis already).
    silent = base64.b64encode(os.urandom(32)).decode()
    code, hello = p.request("POST", "/v1/agents", p.enroll(), {"public_key": silent})
    assert code == 201, hello
    # Redis away while a session opens: it fails at once, cleanly, and says why.
    p.redis.stop()
    code, got = p.request("POST", "/v1/sessions", p.tokens["ada"], {"run_id": story_run})
    assert code == 503 and "task queue is unreachable" in got["detail"], got
    p.redis.start()
    # An assignment lost with Redis's memory: its session fails once nobody takes it up.
    code, opened = p.request("POST", "/v1/sessions", p.tokens["ada"], {"run_id": story_run})
    assert code == 201, opened
    p.redis.stop()
    p.redis.start()
    deadline = time.monotonic() + 60
    while (found := _status(p, opened["session_id"]))["status"] == "assigned":
        assert time.monotonic() < deadline
        time.sleep(1)
    assert found["status"] == "failed" and "in time" in found["detail"], found
    # A real agent waiting through a Redis restart reconnects and serves the next session.
    agent = p.start_agent()
    p.redis.stop()
    p.redis.start()
    session_id = p.open_session("ada", story_run)
    code, doc = _ask_trace(p, session_id)
    assert code == 200 and doc["query"]["value"]["repr"] == "0.0", doc
    p.request("POST", f"/v1/sessions/{session_id}/close", p.tokens["ada"])
    assert agent.wait(timeout=60) == 0


def test_kms_refusing_is_a_clear_error_and_an_audit_event(
    platform: Any, story_run: str, tmp_path: Path
) -> None:
    p = platform
    app = tmp_path / "busy.py"
    app.write_text(BUSY)
    assert p.record([sys.executable, str(app)]).returncode == 5
    run_id = _newest_run(p)["run_id"]
    with sqlite3.connect(p.db) as conn:  # the wrapped key damaged: KMS will not unwrap it
        conn.execute("UPDATE runs SET wrapped_private_key = ? WHERE id = ?",
                     (b"\x01" * 64, run_id))  # fmt: skip
    conn.close()
    agent = p.start_agent()
    code, got = p.request("POST", "/v1/sessions", p.tokens["ada"], {"run_id": run_id})
    assert code == 503 and got["detail"].startswith("KMS refused to unwrap a run key"), got
    code, log = p.request("GET", "/v1/audit?after=0&limit=1000", p.tokens["aud"])
    assert any(e["action"] == "session.open" and e["result"] == "failed" and "KMS" in e["detail"]
               and e["target"] == run_id for e in log), log  # fmt: skip
    # The agent never got anything: it serves the next session.
    session_id = p.open_session("ada", story_run)
    p.request("POST", f"/v1/sessions/{session_id}/close", p.tokens["ada"])
    assert agent.wait(timeout=60) == 0


def test_a_session_left_idle_closes_and_its_agent_exits(platform: Any, story_run: str) -> None:
    p = platform
    # Started by hand, as an operator would: an enrollment from the server's command line.
    agent = p.start_agent("--idle-timeout", "2", enrollment=p.enroll())
    session_id = p.open_session("ada", story_run)
    assert agent.wait(timeout=90) == 0  # nobody asked: it closed its session and left
    found = _status(p, session_id)
    assert found["status"] == "closed" and found["detail"] == "idle timeout", found
    assert _ask_trace(p, session_id)[0] == 409


def test_a_retired_agent_exits(platform: Any) -> None:
    """An agent whose place the server gave up (its session failed before reaching it), or
    whose credential the operator revoked, is told so at its next heartbeat, and exits."""
    p = platform
    agent = p.start_agent()
    with sqlite3.connect(p.db) as conn:
        conn.execute("UPDATE agents SET status = 'gone' WHERE status = 'idle'")
    conn.close()
    assert agent.wait(timeout=60) == 0
    assert b"session retired" in p.logs[-1].read_bytes()
    agent = p.start_agent()
    with sqlite3.connect(p.db) as conn:
        (token_id,) = conn.execute(
            "SELECT t.id FROM api_tokens t JOIN agents a ON a.id = t.agent_id "
            "WHERE a.status = 'idle'"
        ).fetchone()
    conn.close()
    p.cli("server", "revoke-token", "--token-id", token_id)
    assert agent.wait(timeout=60) == 0
    assert b"session retired" in p.logs[-1].read_bytes()


def _proc_text(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


def test_what_an_agent_holds_makes_no_other_agent(platform: Any, story_run: str) -> None:
    """Issue 21, finding 3, with real processes: an attacker who reads everything an agent
    process was given (its environment and command line, as root can) finds no launcher
    token and an enrollment already used; enrolling a rogue agent with it is refused, and the
    next session goes to the real agent, which serves it."""
    p = platform
    launcher = p.tokens["launcher"]
    agent = p.start_agent()  # sealtrace launch-agent: it minted the enrollment, then exec'd
    environ = _proc_text(agent.pid, "environ").split(b"\0")
    cmdline = _proc_text(agent.pid, "cmdline")
    assert b"agent" in cmdline.split(b"\0") and b"launch-agent" not in cmdline
    for leak in (environ, [cmdline]):
        assert not [v for v in leak if launcher.encode() in v or b"LAUNCHER" in v], leak
    (enrollment,) = [v.split(b"=", 1)[1].decode() for v in environ
                     if v.startswith(b"SEALTRACE_AGENT_ENROLLMENT=")]  # fmt: skip
    rogue = {"public_key": base64.b64encode(os.urandom(32)).decode()}
    code, got = p.request("POST", "/v1/agents", enrollment, rogue)
    assert code == 401, got
    session_id = p.open_session("ada", story_run)
    code, doc = _ask_trace(p, session_id)
    assert code == 200 and doc["query"]["value"]["repr"] == "0.0", doc
    with sqlite3.connect(p.db) as conn:
        (served_by,) = conn.execute("SELECT agent_id FROM sessions WHERE id = ?",
                                    (session_id,)).fetchone()  # fmt: skip
        enrolled = conn.execute("SELECT agent_id FROM agent_enrollments WHERE id = ?",
                                (enrollment.split("_")[1],)).fetchone()  # fmt: skip
    conn.close()
    assert enrolled == (served_by,)  # the session went to the agent that enrollment made
    p.request("POST", f"/v1/sessions/{session_id}/close", p.tokens["ada"])
    assert agent.wait(timeout=60) == 0
    code, log = p.request("GET", "/v1/audit?after=0&limit=1000", p.tokens["aud"])
    assert any(e["action"] == "agent.enroll" and e["result"] == "denied"
               and "already used" in e["detail"] for e in log), log  # fmt: skip


def _core_limit(pid: int) -> list[str]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max core file size"):
            return line.split()[4:6]
    raise AssertionError(f"no core limit for {pid}")


def test_the_key_holders_dump_no_core(platform: Any) -> None:
    """The server (it unwraps run keys) and an agent (it holds a session's key) run with no
    core dump, not even by raising their own limit (the hard limit is 0 too); a process
    started the same way without hardening keeps its hard limit (the negative control)."""
    p = platform
    server = next(proc for proc in p.procs if "serve" in proc.args)
    agent = p.start_agent()
    assert _core_limit(server.pid) == ["0", "0"]
    assert _core_limit(agent.pid) == ["0", "0"]
    plain = subprocess.Popen(["sleep", "30"])
    try:
        assert _core_limit(plain.pid)[1] != "0"
    finally:
        plain.kill()
        plain.wait()
    with sqlite3.connect(p.db) as conn:
        conn.execute("UPDATE agents SET status = 'gone' WHERE status = 'idle'")
    conn.close()
    assert agent.wait(timeout=60) == 0
