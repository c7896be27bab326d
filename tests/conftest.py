"""Shared fixtures. Services a test needs are started here, on loopback, and stopped after;
a service that cannot start is an error, never a skip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sealtrace.proxy import Identity, Recipient, write_keypair

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class KeyFiles:
    recipient_path: Path
    identity_path: Path

    @property
    def recipient(self) -> Recipient:
        return Recipient.load(self.recipient_path)

    @property
    def identity(self) -> Identity:
        return Identity.load(self.identity_path)


@pytest.fixture
def keys(tmp_path: Path) -> KeyFiles:
    pub, key = write_keypair(tmp_path / "keys", "test")
    return KeyFiles(pub, key)


@pytest.fixture
def other_keys(tmp_path: Path) -> KeyFiles:
    pub, key = write_keypair(tmp_path / "other-keys", "other")
    return KeyFiles(pub, key)


@pytest.fixture
def secrets_made(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every Secret (sealtrace.proxy.format) made while the test runs, kept alive here so that
    only an explicit wipe, never collection, can have zeroed it (see wiped())."""
    from sealtrace.proxy.format import Secret

    made: list[Secret] = []
    make = Secret.__init__

    def recorded(self: Secret, size: int) -> None:
        make(self, size)
        made.append(self)

    monkeypatch.setattr(Secret, "__init__", recorded)
    return made


def wiped(secrets: list[Any]) -> bool:
    """Every one of them reads all zeros."""
    return all(not any(secret.view()) for secret in secrets)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real moto server (S3 + KMS API) on a loopback port for this test session."""
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"moto server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def aws_env(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def s3_client(aws_env: dict[str, str]) -> Any:
    import boto3

    return boto3.client("s3")


@pytest.fixture
def locked_bucket(s3_client: Any) -> str:
    """A fresh versioned bucket with Object Lock enabled."""
    name = f"sealtrace-test-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


@pytest.fixture
def unlocked_bucket(s3_client: Any) -> str:
    name = f"sealtrace-plain-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


def run_cli(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    """The real `sealtrace` console script in a subprocess."""
    exe = Path(sys.executable).with_name("sealtrace")
    return subprocess.run(
        [str(exe), *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


def seal_cli(
    keys: KeyFiles,
    location: str,
    data: bytes,
    *extra: str,
    run_id: str = "run-test",
    env: dict[str, str] | None = None,
) -> None:
    """Seal data to keys' recipient at location with the real console script; must succeed."""
    proc = run_cli(
        "seal",
        "--recipient",
        str(keys.recipient_path),
        "--run-id",
        run_id,
        "--output",
        location,
        *extra,
        stdin=data,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="session")
def podman_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The sandbox user's rootless Podman API service, on a socket of this test session's."""
    import pwd

    from podman import PodmanClient

    from sealtrace.agent._local import serve_podman

    user = pwd.getpwnam("sealtrace-sbx")
    sock = Path(f"/run/user/{user.pw_uid}/podman/sealtrace-test-{os.getpid()}.sock")
    service = serve_podman(sock)
    client = PodmanClient(base_url=f"unix://{sock}")
    try:
        assert client.version()["Version"], "the Podman service did not answer"
        yield client, user, f"unix://{sock}"
    finally:
        client.close()
        service.terminate()
        service.wait()


@pytest.fixture(scope="session")
def replay_image(podman_service: tuple[Any, Any, str]) -> str:
    from sealtrace.sandbox._image import build_image

    client, _user, _socket = podman_service
    return build_image(client)


def modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `statement`."""
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    return set(json.loads(out.stdout))
