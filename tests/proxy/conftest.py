"""The real server on loopback, for the recorder's tests of `record --server`: `sealtrace
server serve` on SQLite with moto's KMS (the session's moto server), one tenant, one on-call
user (to read the runs back) and one record token. No Redis and no agent: recording needs
neither."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..conftest import _free_port

SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))


@dataclass(frozen=True)
class RecordServer:
    url: str
    record_token: str
    user_token: str  # an on-call user's: reads the runs

    def request(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, Any]:
        request = urllib.request.Request(  # noqa: S310 - the test's own loopback server
            self.url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def run(self, run_id: str) -> dict[str, Any]:
        """The run as the server lists it for people (only runs that started recording)."""
        code, runs = self.request("GET", "/v1/runs?limit=1000", self.user_token)
        assert code == 200, runs
        found = [r for r in runs if r["run_id"] == run_id]
        assert len(found) == 1, f"the server lists no run {run_id}"
        return dict(found[0])


@pytest.fixture(scope="session")
def record_server(
    moto_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RecordServer]:
    import boto3

    work = tmp_path_factory.mktemp("record-server")
    aws = {"AWS_ENDPOINT_URL": moto_server, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip
    kms = boto3.client("kms", endpoint_url=moto_server, region_name="us-east-1",
                       aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip
    env = {**os.environ, **aws,
           "SEALTRACE_SERVER_DATABASE_URL": f"sqlite:///{work / 'server.db'}",
           "SEALTRACE_SERVER_SECRET_KEY": base64.b64encode(os.urandom(24)).decode(),
           "SEALTRACE_SERVER_KMS_KEY_ID": kms.create_key()["KeyMetadata"]["KeyId"]}  # fmt: skip

    def cli(*args: str) -> str:
        proc = subprocess.run([SEALTRACE, "server", *args], env=env, capture_output=True,
                              timeout=120, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout.decode().strip()

    cli("migrate")
    cli("create-tenant", "--tenant", "acme")
    made = json.loads(cli("create-user", "--tenant", "acme", "--name", "ada", "--role",
                          "oncall", "--json"))  # fmt: skip
    record_token = cli("create-token", "--tenant", "acme", "--scope", "record")
    port = _free_port()
    with (work / "server.log").open("wb") as log:
        server = subprocess.Popen([SEALTRACE, "server", "serve", "--port", str(port)], env=env,
                                  stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/openapi.json", timeout=1):  # noqa: S310
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the server did not start: {(work / 'server.log').read_text()}")
                time.sleep(0.1)
        bare = RecordServer(url, record_token, "")
        code, login = bare.request("POST", "/v1/auth/login", "",
                                   {"tenant": "acme", "user": "ada",
                                    "password": made["password"]})  # fmt: skip
        assert code == 200, login
        yield RecordServer(url, record_token, login["token"])
    finally:
        server.terminate()
        server.wait(timeout=30)
