"""The server's tests run against SQLite and a real PostgreSQL: a private cluster started
here (initdb + pg_ctl as the postgres user, on a free port), stopped afterwards. A machine
without PostgreSQL fails these tests; it does not skip them."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import _free_port


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL is not installed (infra/local/bootstrap.sh installs it)")
    return Path(found[-1]).parent


@pytest.fixture(scope="session")
def postgres() -> Iterator[str]:
    """A private PostgreSQL cluster; yields a URL template with {db} for a database name."""
    bin_dir = _postgres_bin()
    user = pwd.getpwnam("postgres")
    # Its own directory (pytest's are private to root), the cluster inside it.
    root = Path(tempfile.mkdtemp(prefix="sealtrace-postgres-"))
    os.chmod(root, 0o711)  # noqa: S103 - the postgres user passes through, lists nothing
    data, sockets, logs = root / "data", root / "sockets", root / "logs"
    for path in (data, sockets, logs):
        path.mkdir()
        os.chown(path, user.pw_uid, user.pw_gid)
    port = _free_port()

    def as_postgres(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            capture_output=True, timeout=60, check=False, cwd="/",
        )  # fmt: skip

    init = as_postgres(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    assert init.returncode == 0, init.stderr.decode()
    start = as_postgres(
        str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(logs / "log"), "-o",
        f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off", "start",
    )  # fmt: skip
    assert start.returncode == 0, start.stderr.decode()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{{db}}"
    finally:
        as_postgres(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database of each kind."""
    from sealtrace.server._db import migrate

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'server.db'}"
        migrate(url)
        yield url
        return
    import psycopg

    template: str = request.getfixturevalue("postgres")
    name = f"sealtrace_{uuid.uuid4().hex[:12]}"
    admin = template.format(db="postgres").replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = template.format(db=name)
    migrate(url)
    try:
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def kms(moto_server: str, aws_env: dict[str, str]) -> Any:
    """A KMS client on moto's server and a fresh symmetric key's id."""
    import boto3

    client = boto3.client("kms")
    key_id = client.create_key(Description="sealtrace run keys (test)")["KeyMetadata"]["KeyId"]
    return client, key_id


@pytest.fixture
def audit_key_id(kms: tuple[Any, str]) -> str:
    """A fresh KMS HMAC key on moto's server, for the audit chain."""
    client, _ = kms
    made = client.create_key(Description="sealtrace audit chain (test)", KeySpec="HMAC_256",
                             KeyUsage="GENERATE_VERIFY_MAC")  # fmt: skip
    return str(made["KeyMetadata"]["KeyId"])


@pytest.fixture
def store(database_url: str) -> Iterator[tuple[Any, Any]]:
    """(engine, session factory) on a fresh migrated database; the engine is disposed after."""
    from sealtrace.server._db import connect

    engine, factory = connect(database_url)
    try:
        yield engine, factory
    finally:
        engine.dispose()


@pytest.fixture
def api(
    database_url: str, store: tuple[Any, Any], kms: tuple[Any, str], audit_key_id: str
) -> Iterator[tuple[Any, dict[str, str]]]:
    """The v1 API on a fresh database (tests/server/_api.py): the client and {name: token}."""
    from ._api import serve_api

    _, factory = store
    yield from serve_api(database_url, factory, kms, audit_key_id=audit_key_id)
