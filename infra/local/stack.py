"""The local stack: Redis, moto's S3 and KMS, the server (SQLite) and agents, on loopback.

    python infra/local/stack.py demo    # the £0.00 story through the platform, once; exit 0
    python infra/local/stack.py up      # keep it running for exploration (Ctrl-C stops it)

`make demo` and `make up` run these (as root, after infra/local/podman-setup.sh). Everything
started here is stopped on exit, and its files (the database, logs, the bucket's contents,
the lease pool) live in one temporary directory removed on exit. The end-to-end tests build
their platform with the same Stack (without the supervisor: they start agents themselves).

Every agent enrolls with its own one-time enrollment: the supervisor (and start_agent)
starts each one with `sealtrace launch-agent` and the stack's launcher token, as a fleet's
launcher would; enroll() mints one with the operator's `sealtrace server enroll-agent`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# Seconds a pool with agents still waiting lets a new session have the machine to itself
# (its first replay and the user's first clicks) before booting the next agent.
REFILL_DELAY = 20.0
APP = REPO / "examples" / "pricing"
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.05)


class RestartableRedis:
    """Redis on one port that can be stopped and started again (nothing kept on disk)."""

    def __init__(self, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> str:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (infra/local/bootstrap.sh)")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.work)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for_port(self.port, self.proc, "redis-server")
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class Stack:
    """The platform on loopback. `podman_socket`: a running rootless Podman service (one is
    started here otherwise). `supervise`: keep `pool` idle agents running at all times, each
    with its sandbox booted and waiting (so that a session starts at loading its recording);
    a fresh one replaces each that takes a session."""

    def __init__(
        self,
        work: Path,
        *,
        podman_socket: str | None = None,
        supervise: bool = True,
        pool: int = 2,
        server_env: dict[str, str] | None = None,
    ) -> None:
        self.work = work
        self.podman_socket = podman_socket
        self.supervise = supervise
        self.pool = pool
        self.server_env = server_env or {}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.agents: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.tokens: dict[str, str] = {}
        self.passwords: dict[str, tuple[str, str]] = {}
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None

    # -- start ----------------------------------------------------------------------------

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(
        self, argv: list[str], log: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        path = self.work / log
        self.logs.append(path)
        with path.open("wb") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        return proc

    def start(self) -> None:
        self.redis = RestartableRedis(self.work / "redis")
        self.redis.start()
        moto_port = free_port()
        moto = self._spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                            str(moto_port)], "moto.log")  # fmt: skip
        self.procs.append(moto)
        wait_for_port(moto_port, moto, "the moto server")
        self.aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{moto_port}",
                    "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
                    "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
        kms = self.aws_client("kms")
        self.kms_key = kms.create_key(Description="sealtrace run keys")["KeyMetadata"]["KeyId"]
        audit = kms.create_key(Description="sealtrace audit chain", KeySpec="HMAC_256",
                               KeyUsage="GENERATE_VERIFY_MAC")  # fmt: skip
        self.audit_key = audit["KeyMetadata"]["KeyId"]
        self.bucket = "sealtrace-local"
        self.aws_client("s3").create_bucket(Bucket=self.bucket, ObjectLockEnabledForBucket=True)
        self.db = self.work / "server.db"
        self.env = {**os.environ, **self.aws,
                    "SEALTRACE_SERVER_DATABASE_URL": f"sqlite:///{self.db}",
                    "SEALTRACE_SERVER_SECRET_KEY": base64.b64encode(os.urandom(24)).decode(),
                    "SEALTRACE_SERVER_KMS_KEY_ID": self.kms_key,
                    "SEALTRACE_SERVER_AUDIT_KEY_ID": self.audit_key,
                    "SEALTRACE_SERVER_REDIS_URL": self.redis.url,
                    "SEALTRACE_SERVER_STORE": f"s3://{self.bucket}",
                    "XDG_CACHE_HOME": str(self.work / "cache"),
                    **self.server_env}  # fmt: skip
        self.cli("server", "migrate")
        for tenant in ("acme", "globex"):
            self.cli("server", "create-tenant", "--tenant", tenant)
        users = (("acme", "ada", "oncall"), ("acme", "aud", "auditor"), ("acme", "adm", "admin"),
                 ("globex", "gil", "oncall"))  # fmt: skip
        for tenant, name, role in users:
            made = json.loads(self.cli("server", "create-user", "--tenant", tenant, "--name",
                                       name, "--role", role, "--json"))  # fmt: skip
            self.passwords[name] = (tenant, made["password"])
        for scope in ("record", "launcher"):
            self.tokens[scope] = self.cli("server", "create-token", "--tenant", "acme",
                                          "--scope", scope)  # fmt: skip
        self.url = self.serve()
        for name, (tenant, password) in self.passwords.items():
            login = {"tenant": tenant, "user": name, "password": password}
            code, got = self.request("POST", "/v1/auth/login", "", login)
            if code != 200:
                raise RuntimeError(f"cannot sign in as {name}: {got}")
            self.tokens[name] = got["token"]
        if self.podman_socket is None:
            from sealtrace.agent import sandbox_user, serve_podman

            user = sandbox_user()
            sock = Path(f"/run/user/{user.pw_uid}/podman/sealtrace-stack-{os.getpid()}.sock")
            self.procs.append(serve_podman(sock))
            self.podman_socket = f"unix://{sock}"
        self.agent_env = {**os.environ, **self.aws, "SEALTRACE_PODMAN_SOCKET": self.podman_socket,
                          "SEALTRACE_AGENT_BROKER": self.redis.url}  # fmt: skip
        if self.supervise:
            self._supervisor = threading.Thread(target=self._keep_the_pool, daemon=True)
            self._supervisor.start()

    def serve(self, **env: str) -> str:
        """A server process on the stack's database and settings (`env` on top: another
        console time-out, say) on a port of its own; its URL."""
        port = free_port()
        log = "server.log" if not env else f"server-{len(self.procs)}.log"
        server = self._spawn([SEALTRACE, "server", "serve", "--port", str(port)], log,
                             {**self.env, **env})  # fmt: skip
        self.procs.append(server)
        wait_for_port(port, server, "the server")
        return f"http://127.0.0.1:{port}"

    # -- helpers --------------------------------------------------------------------------

    def aws_client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.aws["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id=self.aws["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.aws["AWS_SECRET_ACCESS_KEY"],
        )

    def cli(self, *args: str) -> str:
        proc = subprocess.run([SEALTRACE, *args], env=self.env, capture_output=True,
                              timeout=120, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"sealtrace {' '.join(args[:2])}: {proc.stderr.decode().strip()}")
        return proc.stdout.decode().strip()

    def request(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(  # noqa: S310 - the stack's own loopback server
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json",
                     **({"Authorization": f"Bearer {token}"} if token else {})},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None

    def enroll(self, *options: str) -> str:
        """A one-time enrollment for one agent of acme, minted by the operator's command."""
        return self.cli("server", "enroll-agent", "--tenant", "acme", *options)

    def start_agent(self, *options: str, enrollment: str | None = None) -> subprocess.Popen[bytes]:
        """An agent, started as a launcher does (`sealtrace launch-agent` mints its
        enrollment with the launcher token), or with `enrollment` by `sealtrace agent`."""
        if enrollment is None:
            env = {**self.agent_env, "SEALTRACE_LAUNCHER_TOKEN": self.tokens["launcher"]}
            argv = [SEALTRACE, "launch-agent", "--server", self.url, *options]
        else:
            env = {**self.agent_env, "SEALTRACE_AGENT_ENROLLMENT": enrollment}
            argv = [SEALTRACE, "agent", "--server", self.url, *options]
        if self._stopping.is_set():
            raise RuntimeError("the stack is stopping")
        log = f"agent-{len(self.agents)}.log"
        agent = self._spawn(argv, log, env)
        self.agents.append(agent)
        # At boot the agent finds the replay image, or builds it (a minute, the first time).
        deadline = time.monotonic() + 300
        while b"waiting" not in (self.work / log).read_bytes():
            if agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agent did not start: {(self.work / log).read_text()}")
            if self._stopping.is_set():  # stop() may have been past this one already
                agent.kill()  # booting: nothing of a session's in it yet
                agent.wait()
                raise RuntimeError("the stack is stopping")
            time.sleep(0.1)
        return agent

    def idle_agents(self) -> int:
        """Agents enrolled and waiting for a session (their sandbox booted), by the server's
        database."""
        import sqlite3

        with contextlib.closing(sqlite3.connect(self.db, timeout=10)) as conn:
            (count,) = conn.execute("SELECT count(*) FROM agents WHERE status = 'idle'").fetchone()
        alive = sum(1 for agent in self.agents if agent.poll() is None)
        return min(int(count), alive)

    def wait_for_pool(self, timeout: float = 300) -> None:
        """Until the supervisor's pool is full (every agent booted, its sandbox waiting)."""
        deadline = time.monotonic() + timeout
        while self.idle_agents() < self.pool:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the pool did not fill: {self.idle_agents()} of {self.pool}")
            time.sleep(0.2)

    def _keep_the_pool(self) -> None:
        """The supervisor: `pool` idle agents at all times; a fresh one starts (and boots
        its sandbox) when one has taken a session or exited. While other agents wait, the
        fresh one starts REFILL_DELAY seconds later, so that its boot does not compete for
        a small machine's cores with the session's first replay and first clicks."""
        before = 0
        while not self._stopping.is_set():
            with contextlib.suppress(RuntimeError, OSError):
                idle = self.idle_agents()
                taken = idle < before  # a session took one (not the pool's first fill)
                before = idle
                if idle < self.pool:
                    if taken and idle and self._stopping.wait(REFILL_DELAY):
                        return
                    self.start_agent()
                    before = self.idle_agents()
                    continue
            self._stopping.wait(0.5)

    def record(
        self,
        command: list[str],
        *,
        server: str | None = None,
        store: str | None = None,
        app_root: str | None = None,
        service: str = "checkout",
        **env: str,
    ) -> subprocess.CompletedProcess[bytes]:
        """`sealtrace record --server`: the key leased, the run registered and finished
        (into the server's choice of store unless `store` is given); the application's code
        is under `app_root` (the pricing story's by default)."""
        where = ["--store", store] if store else []
        return subprocess.run(
            [SEALTRACE, "record", "--server", server or self.url, *where,
             "--service", service, "--app-root", app_root or str(APP), "--", *command],
            # A production host holds its store's credentials and the record token, never
            # the server's own settings (its secret key, its KMS and database).
            env={**{k: v for k, v in self.env.items() if not k.startswith("SEALTRACE_SERVER_")},
                 "SEALTRACE_TOKEN": self.tokens["record"], **env},
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip

    def record_story(self) -> tuple[subprocess.CompletedProcess[bytes], str]:
        """The pricing job recorded through the server, its inputs then taken away; the
        recorder's result and the run id."""
        inputs = self.work / "inputs"
        serving = subprocess.Popen([sys.executable, str(APP / "serve_inputs.py"), str(inputs)],
                                   stdout=subprocess.PIPE)  # fmt: skip
        try:
            assert serving.stdout is not None
            port = int(serving.stdout.readline())
            proc = self.record([sys.executable, str(APP / "app.py"),
                                f"http://127.0.0.1:{port}/order.json",
                                str(inputs / "promotions.db")])  # fmt: skip
        finally:
            serving.kill()
            serving.wait()
            if serving.stdout is not None:
                serving.stdout.close()
        shutil.rmtree(inputs, ignore_errors=True)
        code, runs = self.request("GET", "/v1/runs", self.tokens["ada"])
        return proc, str(runs[0]["run_id"]) if code == 200 and runs else ""

    def open_session(self, user: str, run_id: str, timeout: float = 300) -> str:
        deadline = time.monotonic() + timeout
        while True:
            code, got = self.request("POST", "/v1/sessions", self.tokens[user],
                                     {"run_id": run_id})  # fmt: skip
            # With the supervisor on, an agent may still be starting (finding its image).
            starting = self.supervise and code == 503 and "no idle agent" in str(got)
            if not starting or time.monotonic() > deadline:
                break
            time.sleep(1)
        if code != 201:
            raise RuntimeError(f"cannot open a session: {code} {got}")
        session_id = str(got["session_id"])
        while got["status"] != "ready":
            if got["status"] != "assigned" or time.monotonic() > deadline:
                raise RuntimeError(f"the session did not become ready: {got}")
            time.sleep(0.5)
            _, got = self.request("GET", f"/v1/sessions/{session_id}", self.tokens[user])
        return session_id

    # -- stop -----------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=60)  # it leaves within a tenth of a second
        for proc in [*self.agents, *reversed(self.procs)]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if hasattr(self, "redis"):
            self.redis.stop()


# -- the two commands -----------------------------------------------------------------------


FETCHONE = "sqlite3.Cursor.fetchone"


def _step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node["inputs"]:
        found += _nodes(child)
    return found


def demo() -> int:
    work = Path(tempfile.mkdtemp(prefix="sealtrace-demo-"))
    try:
        with Stack(work) as stack:
            _step(f"the platform on loopback: server {stack.url}, Redis, S3 and KMS (moto), "
                  f"{stack.pool} agents with their sandboxes booted")  # fmt: skip
            _console_lines(stack)
            _step("record the checkout job through the server into S3 (Object Lock)")
            proc, run_id = stack.record_story()
            sys.stdout.write(proc.stdout.decode())
            if proc.returncode != 0 or not run_id:
                print(proc.stderr.decode(), file=sys.stderr)
                return 1
            _, run = stack.request("GET", f"/v1/runs/{run_id}", stack.tokens["ada"])
            print(f"run {run_id}: {run['status']}, exit {run['exit_status']}, {run['store']}")
            print("inputs gone: the HTTP server is stopped and the database deleted")
            _step("open a session as ada (on-call) over HTTP: an agent replays it in the sandbox")
            session_id = stack.open_session("ada", run_id)
            print(f"session {session_id}: ready")
            _step("why was the customer charged £0.00? trace order.total_price")
            code, doc = stack.request("POST", f"/v1/sessions/{session_id}/queries",
                                      stack.tokens["ada"],
                                      {"kind": "trace", "at": "routes/orders.py:4",
                                       "var": "order.total_price", "depth": 12})  # fmt: skip
            if code != 200:
                print(f"trace failed: {code} {doc}", file=sys.stderr)
                return 1
            nodes = _nodes(doc["root"])
            root = doc["root"]
            product = next(n for n in nodes if n["op"] == "BINARY_OP *")
            reads = [n for n in nodes if (n["origin"] or {}).get("call") == FETCHONE]
            read = reads[0]
            print(
                f"1. order.total_price = {doc['query']['value']['repr']} comes from "
                f"{root['function']} ({Path(root['file']).name}:{root['line']})"
            )
            subtotal = next(n for n in product["inputs"] if n["op"] != "BINARY_OP -")
            minus = next(n for n in nodes if n["op"] == "BINARY_OP -")
            discount = [n for n in minus["inputs"] if n["counter"]][-1]
            print(
                f"2. {Path(product['file']).name}:{product['line']}: total = subtotal * "
                f"(1 - discount) with subtotal {subtotal['value']['repr']} and discount "
                f"{discount['value']['repr']}"
            )
            print(
                f"3. the discount is an external input: {read['origin']['call']} returned "
                f"{read['value']['repr']} (event {read['origin']['event']}): STAFF100 is "
                "still active"
            )
            stack.request("POST", f"/v1/sessions/{session_id}/close", stack.tokens["ada"])
            _step("session closed: the agent removed its container and exited")
            code, chain = stack.request("GET", "/v1/audit/verify", stack.tokens["aud"])
            print(f"audit log: {chain['rows']} rows, whole: {chain['whole']}")
            if not chain["whole"]:
                return 1
            _step("the web console")
            _console_lines(stack)
            if sys.stdin.isatty():
                print("Open it in a browser and walk the story: the run, a session, three "
                      "clicks to STAFF100.", flush=True)  # fmt: skip
                with contextlib.suppress(KeyboardInterrupt, EOFError):
                    input("Press Enter to stop everything. ")
            return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _console_lines(stack: Stack) -> None:
    """Where the console is, and a sign-in for each role to try it with."""
    print(f"console  {stack.url}/console", flush=True)
    for name, (tenant, password) in stack.passwords.items():
        print(f"         sign in: tenant {tenant}, user {name}, password {password}", flush=True)


def up() -> int:
    work = Path(tempfile.mkdtemp(prefix="sealtrace-up-"))
    try:
        with Stack(work) as stack:
            print(f"server   {stack.url}  (API docs: {stack.url}/docs)")
            _console_lines(stack)
            print(f"S3/KMS   {stack.aws['AWS_ENDPOINT_URL']}  bucket {stack.bucket}")
            print(f"Redis    {stack.redis.url}")
            print(f"record   SEALTRACE_TOKEN={stack.tokens['record']} AWS_ENDPOINT_URL="
                  f"{stack.aws['AWS_ENDPOINT_URL']} sealtrace record --server {stack.url} "
                  f"--store s3://{stack.bucket}/acme -- python3 app.py")  # fmt: skip
            launcher = stack.tokens["launcher"]
            print(f"agents   {stack.pool} idle agents at all times, sandboxes booted (sealtrace "
                  f"launch-agent with SEALTRACE_LAUNCHER_TOKEN={launcher})")  # fmt: skip
            print("Ctrl-C stops everything", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command not in ("demo", "up"):
        print("usage: stack.py demo|up", file=sys.stderr)
        sys.exit(2)
    sys.exit(demo() if command == "demo" else up())
