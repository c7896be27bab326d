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
  open a session (the role table says so).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..conftest import REPO, _free_port
from ..sandbox.test_provenance_story import _call, _find

pytestmark = [pytest.mark.e2e, pytest.mark.podman]

APP = REPO / "examples" / "pricing"
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))
SECRET = "e2e-secret-" + "s" * 24


class RestartableRedis:
    """Redis on one port that a test can stop and start again (nothing kept on disk)."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        import socket

        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.work)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return f"redis://127.0.0.1:{self.port}/0"
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@dataclass
class Platform:
    url: str
    env: dict[str, str]  # for agents: AWS, Podman, broker
    db: Path
    bucket: str
    tokens: dict[str, str]  # record, agent, and each user's
    logs: list[Path]
    redis_url: str
    kms_key: str
    redis: RestartableRedis
    agents: list[subprocess.Popen[bytes]] = field(default_factory=list)


def _request(url: str, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
    import httpx2

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx2.request(method, url + path, json=body, timeout=180, headers=headers)
    return response.status_code, (response.json() if response.content else None)


def _cli(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run([SEALTRACE, *args], env=env, capture_output=True, timeout=120,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode().strip()


@pytest.fixture(scope="module")
def platform(
    tmp_path_factory: pytest.TempPathFactory,
    moto_server: str,
    podman_service: tuple[Any, Any, str],
    replay_image: str,
) -> Iterator[Platform]:
    import boto3

    work = tmp_path_factory.mktemp("platform")
    redis = RestartableRedis(work / "redis")
    redis_server = redis.start()
    aws = {"AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    kms = boto3.client("kms", endpoint_url=moto_server, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    key_id = kms.create_key(Description="sealtrace e2e")["KeyMetadata"]["KeyId"]
    s3 = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1",
                      aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    bucket = f"sealtrace-e2e-{os.getpid()}"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    db = work / "server.db"
    env = {**os.environ, **aws,
           "SEALTRACE_SERVER_DATABASE_URL": f"sqlite:///{db}",
           "SEALTRACE_SERVER_SECRET_KEY": SECRET,
           "SEALTRACE_SERVER_KMS_KEY_ID": key_id,
           "SEALTRACE_SERVER_REDIS_URL": redis_server,
           # Faults show fast: an agent silent for 5 s is gone, an assignment not taken
           # up in 20 s has failed.
           "SEALTRACE_SERVER_AGENT_SILENCE": "5",
           "SEALTRACE_SERVER_ASSIGN_TIMEOUT": "20"}  # fmt: skip
    _cli(env, "server", "migrate")
    for tenant in ("acme", "globex"):
        _cli(env, "server", "create-tenant", "--tenant", tenant)
    passwords = {}
    for tenant, name, role in (("acme", "ada", "oncall"), ("acme", "aud", "auditor"),
                               ("globex", "gil", "oncall")):  # fmt: skip
        made = json.loads(_cli(env, "server", "create-user", "--tenant", tenant, "--name", name,
                               "--role", role, "--json"))  # fmt: skip
        passwords[name] = (tenant, made["password"])
    tokens = {
        "record": _cli(env, "server", "create-token", "--tenant", "acme", "--scope", "record"),
        "agent": _cli(env, "server", "create-token", "--tenant", "acme", "--scope", "agent"),
    }
    port = _free_port()
    log = work / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen([SEALTRACE, "server", "serve", "--port", str(port)], env=env,
                                  stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        import httpx2

        try:
            if _request(url, "GET", "/health", "")[0] == 200:
                break
        except httpx2.TransportError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    for name, (tenant, password) in passwords.items():
        code, got = _request(url, "POST", "/v1/auth/login", "",
                             {"tenant": tenant, "user": name, "password": password})  # fmt: skip
        assert code == 200, got
        tokens[name] = got["token"]
    agent_env = {**os.environ, **aws, "SEALTRACE_PODMAN_SOCKET": podman_service[2],
                 "SEALTRACE_AGENT_BROKER": redis_server}  # fmt: skip
    found = Platform(url, agent_env, db, bucket, tokens, [log], redis_server, key_id, redis)
    try:
        yield found
    finally:
        for agent in found.agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
        server.terminate()
        server.wait(timeout=30)
        redis.stop()


def _record(
    p: Platform, work: Path, command: list[str], **env: str
) -> subprocess.CompletedProcess[bytes]:
    """`sealtrace record --server`: the key leased, the run registered and finished."""
    return subprocess.run(
        [SEALTRACE, "record", "--server", p.url, "--store", f"s3://{p.bucket}/acme",
         "--service", "checkout", "--app-root", str(APP), "--", *command],
        env={**p.env, "SEALTRACE_TOKEN": p.tokens["record"], "XDG_CACHE_HOME": str(work),
             **env},
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip


def _newest_run(p: Platform) -> dict[str, Any]:
    code, runs = _request(p.url, "GET", "/v1/runs", p.tokens["ada"])
    assert code == 200 and runs, runs
    return dict(runs[0])


def _record_story(p: Platform, work: Path) -> str:
    """Record the pricing job through the server into S3; its inputs are gone afterwards."""
    inputs = work / "inputs"
    serving = subprocess.Popen([sys.executable, str(APP / "serve_inputs.py"), str(inputs)],
                               stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert serving.stdout is not None
        port = int(serving.stdout.readline())
        proc = _record(p, work, [sys.executable, str(APP / "app.py"),
                                 f"http://127.0.0.1:{port}/order.json",
                                 str(inputs / "promotions.db")])  # fmt: skip
    finally:
        serving.kill()
        serving.wait()
        assert serving.stdout is not None
        serving.stdout.close()
    assert proc.returncode == 0 and b'"total_price": 0.0' in proc.stdout, proc.stderr.decode()
    assert b"sealtrace" not in proc.stderr, proc.stderr.decode()
    shutil.rmtree(inputs)
    run = _newest_run(p)
    assert run["status"] == "complete" and run["service"] == "checkout", run
    assert run["store"].startswith(f"s3://{p.bucket}/acme/run-") and run["exit_status"] == 0
    return str(run["run_id"])


def _aws(p: Platform, service: str) -> Any:
    import boto3

    return boto3.client(service, endpoint_url=p.env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                        aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip


def _start_agent(p: Platform, work: Path) -> subprocess.Popen[bytes]:
    log = work / f"agent-{len(p.agents)}.log"
    p.logs.append(log)
    env = {**p.env, "SEALTRACE_AGENT_TOKEN": p.tokens["agent"]}
    with log.open("wb") as out:
        agent = subprocess.Popen([SEALTRACE, "agent", "--server", p.url], env=env, stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
    p.agents.append(agent)
    deadline = time.monotonic() + 60
    while b"waiting" not in log.read_bytes():
        assert agent.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return agent


def _open(p: Platform, user: str, run_id: str) -> str:
    code, got = _request(p.url, "POST", "/v1/sessions", p.tokens[user], {"run_id": run_id})
    assert code == 201, got
    session_id = str(got["session_id"])
    deadline = time.monotonic() + 180
    while got["status"] != "ready":
        assert got["status"] == "assigned" and time.monotonic() < deadline, got
        time.sleep(0.5)
        code, got = _request(p.url, "GET", f"/v1/sessions/{session_id}", p.tokens[user])
        assert code == 200, got
    return session_id


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


def _recording_key(p: Platform, run_id: str) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from sealtrace.proxy import Identity
    from sealtrace.proxy._format import unwrap_recording_key

    with sqlite3.connect(p.db) as conn:
        wrapped_private, tenant, wrapped_recording = conn.execute(
            "SELECT wrapped_private_key, tenant_id, wrapped_recording_key FROM runs WHERE id = ?",
            (run_id,),
        ).fetchone()
    conn.close()
    kms = _aws(p, "kms")
    context = {"tenant": str(tenant), "run": run_id, "purpose": "run-private-key"}
    private = kms.decrypt(CiphertextBlob=wrapped_private, EncryptionContext=context)["Plaintext"]
    identity = Identity(X25519PrivateKey.from_private_bytes(private))
    return unwrap_recording_key(bytes(wrapped_recording), identity, run_id)


def _session_dirs() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("sealtrace-")}


@pytest.fixture(scope="module")
def story_run(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> str:
    return _record_story(platform, tmp_path_factory.mktemp("story"))


def test_the_story_through_the_platform(platform: Platform, story_run: str, tmp_path: Path) -> None:
    p = platform
    run_id = story_run
    before_shm = _session_dirs()
    agent = _start_agent(p, tmp_path)
    with RedisTap(p.redis_url) as tap:
        session_id = _open(p, "ada", run_id)
        code, doc = _request(p.url, "POST", f"/v1/sessions/{session_id}/queries", p.tokens["ada"],
                             {"kind": "trace", "at": "routes/orders.py:4",
                              "var": "order.total_price", "depth": 12})  # fmt: skip
        assert code == 200, doc
        # The three jumps: the £0.00 total, the discount line, the STAFF100 promotions read.
        assert doc["query"]["value"]["repr"] == "0.0"
        product = _find(doc["root"], op="BINARY_OP *")
        assert "49.99" in {n["value"]["repr"] for n in product["inputs"]}
        read = _find(doc["root"], origin=lambda n: _call(n) == "sqlite3.Cursor.fetchone")
        assert read["value"]["repr"] == "(100,)"
        code, stack = _request(p.url, "POST", f"/v1/sessions/{session_id}/queries",
                               p.tokens["ada"], {"kind": "inspect-stack", "at": "end"})  # fmt: skip
        assert code == 200 and stack["frames"][0]["function"] == "<module>", stack
        code, bad = _request(p.url, "POST", f"/v1/sessions/{session_id}/queries",
                             p.tokens["ada"], {"kind": "trace", "at": "nowhere.py:1",
                                               "var": "x"})  # fmt: skip
        assert code == 422, bad
        # Another tenant's user, a record token, and an auditor.
        assert _request(p.url, "GET", f"/v1/sessions/{session_id}", p.tokens["gil"])[0] == 404
        assert _request(p.url, "POST", "/v1/sessions", p.tokens["gil"],
                        {"run_id": run_id})[0] == 404  # fmt: skip
        assert _request(p.url, "GET", "/v1/runs", p.tokens["record"])[0] == 403
        assert _request(p.url, "GET", f"/v1/runs/{run_id}", p.tokens["record"])[0] == 403
        assert _request(p.url, "POST", "/v1/sessions", p.tokens["aud"],
                        {"run_id": run_id})[0] == 403  # fmt: skip
        code, closed = _request(p.url, "POST", f"/v1/sessions/{session_id}/close",
                                p.tokens["ada"])  # fmt: skip
        assert code == 200 and closed["status"] == "closed"
        assert agent.wait(timeout=60) == 0  # one session, then the agent is gone
        # A second session: a new agent, a different sealed key.
        _start_agent(p, tmp_path)
        second = _open(p, "ada", run_id)
        _request(p.url, "POST", f"/v1/sessions/{second}/close", p.tokens["ada"])
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

    store = redis.Redis.from_url(p.redis_url)
    redis_dump = b"".join(tap.seen) + b"".join((store.dump(k) or b"") + k for k in store.keys("*"))
    places = {"redis": redis_dump, "database": p.db.read_bytes()}
    places.update({str(log): log.read_bytes() for log in p.logs})
    for where, content in places.items():
        for secret in secrets:
            assert secret not in content, f"{secret[:12]!r} found in {where}"
    assert b"sealed_key" in redis_dump  # control: the tap saw the assignments
    assert not _session_dirs() - before_shm  # the agents wiped their tmpfs


BUSY = "import sys\nprint('working', sum(range(10)))\nsys.exit(5)\n"


def test_without_a_server_the_program_runs_unrecorded(platform: Platform, tmp_path: Path) -> None:
    app = tmp_path / "busy.py"
    app.write_text(BUSY)
    plain = subprocess.run([sys.executable, str(app)], capture_output=True, check=False)
    nowhere = Platform(**{**platform.__dict__, "url": f"http://127.0.0.1:{_free_port()}"})
    for attempt in range(2):
        started = time.monotonic()
        run = _record(nowhere, tmp_path, [sys.executable, str(app)])
        assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout) == (5, plain.stdout)
        lines = [line for line in run.stderr.splitlines() if b"sealtrace" in line]
        assert len(lines) == 1 and b"not recording this run" in lines[0], run.stderr
        if attempt:  # backing off: the server is not even asked
            assert b"not asking again yet" in lines[0]
            assert time.monotonic() - started < 10
    # Control: with the server, the same program is recorded.
    recorded = _record(platform, tmp_path / "with", [sys.executable, str(app)])
    assert recorded.returncode == 5 and b"sealtrace" not in recorded.stderr, recorded.stderr


def test_an_unreachable_store_leaves_the_program_alone_and_fails_the_run(
    platform: Platform, tmp_path: Path
) -> None:
    app = tmp_path / "busy.py"
    app.write_text(BUSY)
    plain = subprocess.run([sys.executable, str(app)], capture_output=True, check=False)
    down = f"http://127.0.0.1:{_free_port()}"
    run = _record(platform, tmp_path, [sys.executable, str(app)], AWS_ENDPOINT_URL=down,
                  AWS_MAX_ATTEMPTS="1")  # fmt: skip
    assert (run.returncode, run.stdout) == (plain.returncode, plain.stdout)
    lines = [line for line in run.stderr.splitlines() if b"sealtrace" in line]
    assert len(lines) == 1 and b"recording failed" in lines[0], run.stderr
    newest = _newest_run(platform)
    assert newest["status"] == "failed" and newest["exit_status"] == 5, newest


def _ask_trace(p: Platform, session_id: str) -> tuple[int, Any]:
    question = {"kind": "trace", "at": "routes/orders.py:4", "var": "order.total_price"}
    return _request(p.url, "POST", f"/v1/sessions/{session_id}/queries", p.tokens["ada"],
                    question)  # fmt: skip


def _works(p: Platform, run_id: str, work: Path) -> None:
    """A fresh agent serves a fresh session to the end."""
    agent = _start_agent(p, work)
    session_id = _open(p, "ada", run_id)
    code, doc = _ask_trace(p, session_id)
    assert code == 200 and doc["query"]["value"]["repr"] == "0.0", doc
    _request(p.url, "POST", f"/v1/sessions/{session_id}/close", p.tokens["ada"])
    assert agent.wait(timeout=60) == 0


def _status(p: Platform, session_id: str) -> dict[str, Any]:
    code, found = _request(p.url, "GET", f"/v1/sessions/{session_id}", p.tokens["ada"])
    assert code == 200, found
    return dict(found)


def test_an_agent_killed_mid_session_fails_it_and_the_next_works(
    platform: Platform, story_run: str, tmp_path: Path
) -> None:
    import signal

    p = platform
    agent = _start_agent(p, tmp_path)
    session_id = _open(p, "ada", story_run)
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    code, why = _ask_trace(p, session_id)  # the agent no longer polls: 5 s of silence
    assert code == 502 and "stopped answering" in why["detail"], why
    found = _status(p, session_id)
    assert found["status"] == "failed" and "stopped answering" in found["detail"]
    assert _ask_trace(p, session_id)[0] == 409  # a failed session answers nothing more
    # Its container outlived it; the next agent's boot removes it.
    from podman import PodmanClient

    client = PodmanClient(base_url=p.env["SEALTRACE_PODMAN_SOCKET"])
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
    platform: Platform, story_run: str, tmp_path: Path
) -> None:
    import signal

    p = platform
    # Redis away while a session opens: it fails at once, cleanly, and says why.
    agent = _start_agent(p, tmp_path)
    p.redis.stop()
    code, got = _request(p.url, "POST", "/v1/sessions", p.tokens["ada"], {"run_id": story_run})
    assert code == 503 and "task queue is unreachable" in got["detail"], got
    p.redis.start()
    # An assignment lost with Redis's memory: its session fails once nobody takes it up.
    agent.send_signal(signal.SIGSTOP)
    code, opened = _request(p.url, "POST", "/v1/sessions", p.tokens["ada"], {"run_id": story_run})
    assert code == 201, opened
    p.redis.stop()
    p.redis.start()
    agent.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 60
    while (found := _status(p, opened["session_id"]))["status"] == "assigned":
        assert time.monotonic() < deadline
        time.sleep(1)
    assert found["status"] == "failed" and "in time" in found["detail"], found
    # The agent it was meant for is retired and exits; new sessions work.
    assert agent.wait(timeout=60) == 0
    _works(p, story_run, tmp_path)


def test_kms_refusing_is_a_clear_error_and_an_audit_event(
    platform: Platform, story_run: str, tmp_path: Path
) -> None:
    p = platform
    app = tmp_path / "busy.py"
    app.write_text(BUSY)
    assert _record(p, tmp_path, [sys.executable, str(app)]).returncode == 5
    run_id = _newest_run(p)["run_id"]
    with sqlite3.connect(p.db) as conn:  # the wrapped key damaged: KMS will not unwrap it
        conn.execute("UPDATE runs SET wrapped_private_key = ? WHERE id = ?",
                     (b"\x01" * 64, run_id))  # fmt: skip
    conn.close()
    agent = _start_agent(p, tmp_path)
    code, got = _request(p.url, "POST", "/v1/sessions", p.tokens["ada"], {"run_id": run_id})
    assert code == 503 and got["detail"].startswith("KMS refused to unwrap a run key"), got
    code, log = _request(p.url, "GET", "/v1/audit?after=0&limit=1000", p.tokens["aud"])
    assert any(e["action"] == "session.open" and e["result"] == "failed" and "KMS" in e["detail"]
               and e["target"] == run_id for e in log), log  # fmt: skip
    # The agent never got anything: it serves the next session.
    session_id = _open(p, "ada", story_run)
    _request(p.url, "POST", f"/v1/sessions/{session_id}/close", p.tokens["ada"])
    assert agent.wait(timeout=60) == 0
