"""Installed like a user: the wheel built once from the repository (`python -m build`), then
each role's extra installed into a fresh venv outside the repository (`pip install
'WHEEL[extra]'`, nothing editable, no dev dependencies) and run from there, with the venv's
own `sealtrace` and `python`, a working directory outside the repository and no PYTHONPATH.

- recorder (no extra): `--help`, `keygen`, `record` of a small program (its output is the
  program's), `inspect` says the recording is complete; `import sealtrace.proxy` works and
  brings none of the other roles' stacks;
- analyst (`[analyst]`): `replay` is bit-exact and `trace` finds the value, in-process; and
  `replay --sandbox` (rootless Podman, the image built from this venv) agrees with it; and
  the recorder's run, replayed and traced in the sandbox from an image of the production
  venv's distributions (`sandbox build-image --requirements`), agrees with its own replay;
- server (`[server]`): `server migrate`, `server serve` on loopback, `GET /health` is 200;
- agent (`[agent]`): against the server venv's server and a Redis, the agent enrolls with a
  one-time enrollment the server's command line minted, boots (its replay image built from
  its venv), waits, and exits 0 when the server retires it;
- the negative control: the wheel without one declared dependency (click) fails `--help`,
  so this tier catches a dependency the code needs but the package does not declare.

A service that cannot start, or a wheel that does not build, is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..conftest import REPO, _free_port

pytestmark = pytest.mark.install

# The interpreter this venv was made from: a user's python3.11, not the development venv.
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)
# What must not leak from the development session into a user's shell.
_DROPPED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")
_DROPPED_PREFIXES = ("SEALTRACE_", "AWS_")

PROGRAM = """\
import sys

with open(sys.argv[1]) as handle:
    words = handle.read().split()
total = len(words) * 10
print("words", len(words), "total", total)
"""
# The print's line: `total` is set by then.
TOTAL_LINE = next(n for n, line in enumerate(PROGRAM.splitlines(), 1) if line.startswith("print"))
EXPECTED_OUTPUT = b"words 3 total 30\n"


def _outside_repo(path: Path) -> Path:
    assert not path.resolve().is_relative_to(REPO), f"{path} is inside the repository"
    return path


def _user_env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a user's shell with `bin_dir` first on PATH: nothing points at the
    repository or its development venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not _in_repo(p)]
    env["PATH"] = os.pathsep.join([str(bin_dir), *path] if bin_dir else path)
    env.update(extra)
    return env


def _in_repo(path: str) -> bool:
    return Path(path).resolve().is_relative_to(REPO)


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=timeout,
                          check=False)  # fmt: skip


def _ok(proc: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert proc.returncode == 0, (
        f"{' '.join(map(str, proc.args))} exited {proc.returncode}:\n"
        f"{proc.stderr.decode(errors='replace')[-3000:]}"
    )
    return proc


@dataclass(frozen=True)
class Venv:
    """A fresh venv outside the repository, and a working directory next to it."""

    root: Path
    work: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        return _user_env(self.bin, **extra)

    def python(self, *args: str, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return _run([str(self.bin / "python"), *args], self.work, self.env(**extra))

    def pip(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        # pip's own cache (~/.cache/pip) is reused; downloads come from the configured index.
        return _ok(self.python("-m", "pip", "install", "--quiet", *args))

    def sealtrace(self, *args: str, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return _run([str(self.bin / "sealtrace"), *args], self.work, self.env(**extra))

    def spawn(self, args: list[str], log: Path, **extra: str) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            return subprocess.Popen([str(self.bin / "sealtrace"), *args], cwd=self.work,
                                    env=self.env(**extra), stdout=out,
                                    stderr=subprocess.STDOUT)  # fmt: skip


def _new_venv(base: Path, name: str) -> Venv:
    root = _outside_repo(base / name)
    work = root.with_name(f"{name}-work")
    work.mkdir(parents=True)
    _ok(_run([BASE_PYTHON, "-m", "venv", str(root)], work, _user_env()))
    return Venv(root, work)


@pytest.fixture(scope="session")
def install_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _outside_repo(tmp_path_factory.mktemp("install"))


@pytest.fixture(scope="session")
def wheel(install_base: Path) -> Path:
    """The wheel, built once from the repository with the standard tool (isolated build
    environment, native code compiled), into a directory outside the repository. Its own
    build directory: the repository's build/ belongs to the editable development install."""
    out = install_base / "dist"
    proc = _run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out),
         f"-Cbuild-dir={install_base / 'build'}", str(REPO)],
        install_base, _user_env(), timeout=1800,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"the wheel did not build:\n{proc.stdout.decode()[-4000:]}\n"
                    f"{proc.stderr.decode()[-4000:]}")  # fmt: skip
    wheels = sorted(out.glob("sealtrace-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _role_venv(install_base: Path, wheel: Path, name: str, extra: str | None) -> Venv:
    venv = _new_venv(install_base, name)
    venv.pip(f"{wheel}[{extra}]" if extra else str(wheel))
    return venv


@pytest.fixture(scope="module")
def recorder_venv(install_base: Path, wheel: Path) -> Venv:
    return _role_venv(install_base, wheel, "recorder", None)


@pytest.fixture(scope="module")
def analyst_venv(install_base: Path, wheel: Path) -> Venv:
    return _role_venv(install_base, wheel, "analyst", "analyst")


@pytest.fixture(scope="module")
def server_venv(install_base: Path, wheel: Path) -> Venv:
    return _role_venv(install_base, wheel, "server", "server")


@pytest.fixture(scope="module")
def agent_venv(install_base: Path, wheel: Path) -> Venv:
    return _role_venv(install_base, wheel, "agent", "agent")


@dataclass(frozen=True)
class Recording:
    location: Path
    identity: Path


def _record(venv: Venv, name: str) -> Recording:
    """keygen, then `record -- python APP/prog.py DATA` with the venv's python first on PATH
    (an activated venv); the program's output and exit status are its own."""
    where = venv.work / name
    app = where / "app"
    app.mkdir(parents=True)
    (app / "prog.py").write_text(PROGRAM)
    data = where / "words.txt"
    data.write_text("hello recorded world\n")
    made = _ok(venv.sealtrace("keygen", "--out", str(where / "keys"), "--name", "k"))
    assert b"k.pub" in made.stdout, made.stdout
    pub, key = where / "keys" / "k.pub", where / "keys" / "k.key"
    location = where / "recording"
    proc = _ok(venv.sealtrace("record", "--recipient", str(pub), "--output", str(location),
                              "--run-id", "r1", "--app-root", str(app), "--", "python",
                              str(app / "prog.py"), str(data)))  # fmt: skip
    assert proc.stdout == EXPECTED_OUTPUT, proc.stdout
    data.unlink()  # replay must not need it
    return Recording(location, key)


@pytest.fixture(scope="module")
def production_recording(recorder_venv: Venv) -> Recording:
    return _record(recorder_venv, "run")


def test_recorder_role(recorder_venv: Venv, production_recording: Recording) -> None:
    """`pip install WHEEL`: the production host's command line and recorder."""
    venv = recorder_venv
    shown = _ok(venv.sealtrace("--help"))
    assert b"record" in shown.stdout and b"keygen" in shown.stdout, shown.stdout
    found = _ok(venv.python("-c", textwrap.dedent("""
        import importlib.util, json, sealtrace.proxy
        others = ["boto3", "fastapi", "celery", "podman", "sqlalchemy", "pydantic_settings"]
        print(json.dumps([sealtrace.proxy.__file__,
                          [m for m in others if importlib.util.find_spec(m)]]))
    """)))  # fmt: skip
    where, others = json.loads(found.stdout)
    assert Path(where).is_relative_to(venv.root), where  # the installed copy, not the repo
    assert others == [], f"the recorder's install brought {others}"
    inspected = _ok(venv.sealtrace("inspect", str(production_recording.location), "--json"))
    doc = json.loads(inspected.stdout)
    assert doc["run_id"] == "r1" and doc["alarms"] == [], doc
    assert doc["completeness"].startswith("claims complete"), doc
    assert doc["segments"] and doc["segments"][-1]["has_final"], doc


def _in_process(venv: Venv) -> list[str]:
    """Today `replay` runs in-process unless given --sandbox; should it grow an explicit
    choice, ask for in-process explicitly."""
    shown = _ok(venv.sealtrace("replay", "--help", COLUMNS="200")).stdout
    return ["--in-process"] if b"--in-process" in shown else []


def _without_timing(receipt: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in receipt.items() if k != "seconds"}


@pytest.fixture(scope="module")
def analyst_recording(analyst_venv: Venv) -> Recording:
    """Recorded with the analyst's own install: replay insists on the recorded distribution
    set, and the analyst extra adds distributions a base install does not have."""
    return _record(analyst_venv, "run")


@pytest.fixture(scope="module")
def analyst_receipt(analyst_venv: Venv, analyst_recording: Recording) -> dict[str, Any]:
    proc = _ok(analyst_venv.sealtrace("replay", str(analyst_recording.location), "--identity",
                                      str(analyst_recording.identity),
                                      *_in_process(analyst_venv), "--json"))  # fmt: skip
    return dict(json.loads(proc.stdout))


def test_analyst_role_in_process(
    analyst_venv: Venv, analyst_recording: Recording, analyst_receipt: dict[str, Any]
) -> None:
    """`pip install 'WHEEL[analyst]'`: replay and provenance, in-process."""
    assert analyst_receipt["status"] == "bit-exact", analyst_receipt
    assert analyst_receipt["exit_status"] == {"recorded": 0, "replayed": 0}
    proc = _ok(analyst_venv.sealtrace("trace", str(analyst_recording.location), "--identity",
                                      str(analyst_recording.identity), "--at",
                                      f"prog.py:{TOTAL_LINE}", "--var", "total",
                                      "--json"))  # fmt: skip
    doc = json.loads(proc.stdout)
    assert doc["query"]["value"]["repr"] == "30", doc["query"]
    assert doc["root"]["value"]["repr"] == "30", doc["root"]
    assert doc["root"]["file"].endswith("prog.py"), doc["root"]


def _replay_image(venv: Venv, client: Any, env: dict[str, str]) -> str:
    """The image this venv's commands use (built if missing): `sandbox build-image` finds it."""
    proc = _ok(venv.sealtrace("sandbox", "build-image", "--json", **env))
    reference = str(json.loads(proc.stdout)["image"])
    assert client.images.exists(reference), reference
    return reference


@pytest.fixture
def images_removed(podman_service: tuple[Any, Any, str]) -> Iterator[list[str]]:
    """Images built from a test's throwaway venv: removed afterwards (each is a few hundred MB
    and no other venv has those paths)."""
    built: list[str] = []
    yield built
    client = podman_service[0]
    for reference in built:
        if client.images.exists(reference):
            client.images.remove(reference, force=True)


@pytest.mark.podman
def test_analyst_role_sandboxed(
    analyst_venv: Venv,
    analyst_recording: Recording,
    analyst_receipt: dict[str, Any],
    podman_service: tuple[Any, Any, str],
    images_removed: list[str],
) -> None:
    """`replay --sandbox` from the analyst's venv: the replay image is built from that venv's
    interpreter and site-packages, and the receipt is the in-process one."""
    env = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    proc = analyst_venv.sealtrace("replay", str(analyst_recording.location), "--identity",
                                  str(analyst_recording.identity), "--sandbox", "--json",
                                  **env)  # fmt: skip
    with_image = _replay_image(analyst_venv, podman_service[0], env)
    images_removed.append(with_image)
    boxed = json.loads(_ok(proc).stdout)
    assert boxed["status"] == "bit-exact", boxed
    assert _without_timing(boxed) == _without_timing(analyst_receipt)


@pytest.mark.podman
def test_analyst_replays_the_production_run_in_the_sandbox(
    recorder_venv: Venv,
    production_recording: Recording,
    analyst_venv: Venv,
    podman_service: tuple[Any, Any, str],
    images_removed: list[str],
) -> None:
    """The run recorded on the production host (the base install), replayed by the analyst.
    Replay insists on the recorded distribution set, which the analyst's extra grows, so
    in-process replay of it belongs to the production environment; the sandbox's image carries
    production's set instead (`pip freeze --all` there, `sandbox build-image --requirements`
    here), and says what the production environment's own replay says."""
    recording = production_recording
    args = (str(recording.location), "--identity", str(recording.identity))
    at_home = _ok(recorder_venv.sealtrace("replay", *args, *_in_process(recorder_venv), "--json"))
    freeze = _ok(recorder_venv.python("-m", "pip", "freeze", "--all", "--exclude", "sealtrace"))
    requirements = analyst_venv.work / "production-freeze.txt"
    requirements.write_bytes(freeze.stdout)
    env = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    built = _ok(analyst_venv.sealtrace("sandbox", "build-image", "--requirements",
                                       str(requirements), "--json", **env))  # fmt: skip
    image = str(json.loads(built.stdout)["image"])
    images_removed.append(image)
    env["SEALTRACE_REPLAY_IMAGE"] = image
    boxed = json.loads(_ok(analyst_venv.sealtrace("replay", *args, "--sandbox", "--json",
                                                  **env)).stdout)  # fmt: skip
    assert boxed["status"] == "bit-exact", boxed
    assert _without_timing(boxed) == _without_timing(json.loads(at_home.stdout))
    traced = _ok(analyst_venv.sealtrace("trace", *args, "--sandbox", "--at",
                                        f"prog.py:{TOTAL_LINE}", "--var", "total", "--json",
                                        **env))  # fmt: skip
    assert json.loads(traced.stdout)["root"]["value"]["repr"] == "30", traced.stdout


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{what} did not start: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@dataclass
class Server:
    url: str
    db: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path


def _server_settings(work: Path, **more: str) -> dict[str, str]:
    return {
        "SEALTRACE_SERVER_DATABASE_URL": f"sqlite:///{work / 'server.db'}",
        "SEALTRACE_SERVER_SECRET_KEY": secrets.token_urlsafe(24),
        **more,
    }


def _serve(venv: Venv, settings: dict[str, str], name: str) -> Server:
    port = _free_port()
    log = venv.work / f"{name}.log"
    proc = venv.spawn(["server", "serve", "--port", str(port)], log, **settings)
    _wait_for_port(port, proc, log, "the server")
    db = Path(settings["SEALTRACE_SERVER_DATABASE_URL"].removeprefix("sqlite:///"))
    return Server(f"http://127.0.0.1:{port}", db, settings, proc, log)


def test_server_role(server_venv: Venv) -> None:
    """`pip install 'WHEEL[server]'`: migrate an SQLite database, serve, answer /health."""
    venv = server_venv
    settings = _server_settings(venv.work / "health")
    (venv.work / "health").mkdir()
    migrated = _ok(venv.sealtrace("server", "migrate", **settings))
    assert migrated.stdout.strip() == b"migrated", migrated.stdout
    server = _serve(venv, settings, "health")
    try:
        with urllib.request.urlopen(f"{server.url}/health", timeout=30) as response:  # noqa: S310
            assert response.status == 200
            assert json.loads(response.read()) == {"status": "ok"}
    finally:
        code = _stop(server.proc)
    # uvicorn shuts down gracefully, then re-raises the SIGTERM it caught (so a supervisor
    # sees the signal): -15 is its clean stop.
    assert code in (0, -signal.SIGTERM), server.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.fail("redis-server is not installed (infra/local/bootstrap.sh)")
    port = _free_port()
    log = tmp_path / "redis.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(tmp_path)],
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        _wait_for_port(port, proc, log, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.podman
def test_agent_role(
    server_venv: Venv,
    agent_venv: Venv,
    redis_url: str,
    podman_service: tuple[Any, Any, str],
    images_removed: list[str],
) -> None:
    """`pip install 'WHEEL[agent]'`: against the server role's server and a Redis, the agent
    finds (builds) its replay image from its own venv, enrolls, waits for an assignment, and
    exits 0 when the server retires it (its place given up), saying so."""
    work = server_venv.work / "platform"
    work.mkdir()
    settings = _server_settings(work, SEALTRACE_SERVER_REDIS_URL=redis_url)
    _ok(server_venv.sealtrace("server", "migrate", **settings))
    _ok(server_venv.sealtrace("server", "create-tenant", "--tenant", "acme", **settings))
    made = _ok(server_venv.sealtrace("server", "enroll-agent", "--tenant", "acme",
                                     **settings))  # fmt: skip
    enrollment = made.stdout.decode().strip()
    assert enrollment.startswith("ste_"), made.stdout
    server = _serve(server_venv, settings, "platform")
    podman = {"SEALTRACE_PODMAN_SOCKET": podman_service[2]}
    log = agent_venv.work / "agent.log"
    agent = agent_venv.spawn(["agent", "--server", server.url, "--broker", redis_url], log,
                             SEALTRACE_AGENT_ENROLLMENT=enrollment, **podman)  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # the first boot builds the image
        while b"waiting" not in log.read_bytes():
            if agent.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the agent did not start: {log.read_text(errors='replace')}")
            time.sleep(0.2)
        images_removed.append(_replay_image(agent_venv, podman_service[0], podman))
        with sqlite3.connect(server.db) as conn:
            retired = conn.execute("UPDATE agents SET status = 'gone' WHERE status = 'idle'")
            assert retired.rowcount == 1
        conn.close()
        code = agent.wait(timeout=60)  # told at its next heartbeat (every 10 s)
    finally:
        _stop(agent)
        server_code = _stop(server.proc)
    output = log.read_text(errors="replace")
    assert code == 0, output
    assert "agent: session retired" in output, output
    assert server_code in (0, -signal.SIGTERM), server.log.read_text(errors="replace")[-3000:]


def test_a_missing_dependency_fails_the_tier(install_base: Path, wheel: Path) -> None:
    """The negative control: the same wheel with one declared dependency (click) left out,
    every other base dependency installed. `--help` must fail, so a dependency the code
    imports but the package stops declaring cannot pass this tier."""
    venv = _new_venv(install_base, "without-click")
    venv.pip("--no-deps", str(wheel))
    listed = _ok(venv.python("-c", "import importlib.metadata as m, json; "
                                   "print(json.dumps(m.requires('sealtrace')))"))  # fmt: skip
    base = [r for r in json.loads(listed.stdout) if "extra ==" not in r]
    others = [r for r in base if not r.lower().startswith("click")]
    assert len(others) == len(base) - 1 >= 1, base
    venv.pip(*others)
    _ok(venv.python("-m", "pip", "uninstall", "--yes", "--quiet", "click"))  # were it brought
    assert venv.python("-c", "import click").returncode != 0
    proc = venv.sealtrace("--help")
    assert proc.returncode != 0, proc.stdout
    assert b"click" in proc.stderr, proc.stderr
