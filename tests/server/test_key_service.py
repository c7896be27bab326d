"""The key service against moto's KMS server, on SQLite and PostgreSQL.

- minted private keys are stored only as KMS ciphertext under {tenant, run, purpose}: the
  raw key is nowhere in the database, and a ciphertext moved to another run does not unwrap;
- leases hand out each public key once, mint a batch when the pool runs dry, and never cross
  tenants; every run (leased or not, in any batch, of any tenant) has its own key pair;
- a run goes leased → recording → complete/incomplete/failed, and nothing else; only the
  token its key was leased to registers and finishes it;
- a real recording sealed to a leased key gives its recording key to the one agent and
  session it is re-sealed for, and to nobody else;
- re-sealing a run's key for an agent leaves the run's private key and the recording key it
  held wiped (docs/platform.md, "Key hygiene");
- KMS refusing (a key it does not have) is one clear error, and nothing is half-minted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from sealtrace.agent._contracts import open_session_key
from sealtrace.proxy import Identity, Recipient, SealedReader, SealedWriter
from sealtrace.proxy._errors import WrongIdentityError
from sealtrace.proxy._format import RecordingHeader, unwrap_recording_key
from sealtrace.proxy._keys import generate_identity
from sealtrace.proxy._store import LocalDirStore
from sealtrace.server import KeyServiceError, RunNotFound
from sealtrace.server._key_service import KeyService, KmsKeyWrapper, _context
from sealtrace.server._models import Run, RunStatus, Tenant

from ..conftest import wiped


@pytest.fixture
def service(store: tuple[Any, Any], kms: tuple[Any, str]) -> tuple[KeyService, list[int]]:
    _, factory = store
    client, key_id = kms
    with factory() as db:
        tenants = [Tenant(name="acme"), Tenant(name="globex")]
        db.add_all(tenants)
        db.commit()
        ids = [t.id for t in tenants]
    return KeyService(factory, KmsKeyWrapper(client, key_id)), ids


def _private_of(keys: KeyService, run: Run) -> bytes:
    with keys.wrapper.unwrap(run.wrapped_private_key, _context(run.tenant_id, run.id)) as key:
        return bytes(key.view())  # a copy the test may keep


def test_private_keys_exist_only_wrapped(
    service: tuple[KeyService, list[int]], database_url: str
) -> None:
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    keys, (acme, _) = service
    run_ids = keys.mint(acme, 3)
    with keys.factory() as db:
        runs = list(db.scalars(select(Run).where(Run.id.in_(run_ids))))
    raw = [_private_of(keys, run) for run in runs]
    for run, private in zip(runs, raw, strict=True):
        # The ciphertext holds the private half of the stored public key ...
        public = X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()
        assert public == run.public_key and len(private) == 32
        assert private not in run.wrapped_private_key
    # ... and the raw key is nowhere in the database.
    dump = _dump(database_url)
    assert dump and not [p for p in raw if p in dump]
    # Control: the dump does hold what was stored (the public keys).
    assert all(run.public_key in dump for run in runs)
    # A ciphertext moved to another run's context does not unwrap.
    with pytest.raises(KeyServiceError, match="KMS refused to unwrap"):
        keys.wrapper.unwrap(runs[0].wrapped_private_key, _context(acme, runs[1].id))


def _dump(url: str) -> bytes:
    if url.startswith("sqlite"):
        return Path(url.removeprefix("sqlite:///")).read_bytes()
    import psycopg

    plain = url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(plain) as conn:
        rows = conn.execute("SELECT public_key, wrapped_private_key FROM runs").fetchall()
    return b"".join(bytes(a) + bytes(b) for a, b in rows)


def test_leases_are_handed_out_once_per_tenant(service: tuple[KeyService, list[int]]) -> None:
    keys, (acme, globex) = service
    first = keys.lease(acme, "tok1", 4, mint_batch=5)  # mints 5: none were there
    second = keys.lease(acme, "tok1", 4, mint_batch=5)  # 1 left, mints 5 more
    assert len(first) == len(second) == 4
    assert not {lease.run_id for lease in first} & {lease.run_id for lease in second}
    other = keys.lease(globex, "tok2", 2, mint_batch=2)
    assert not {lease.run_id for lease in other} & {lease.run_id for lease in first + second}
    with keys.factory() as db:
        leased = db.scalars(select(Run).where(Run.status == RunStatus.LEASED)).all()
        minted = db.scalars(select(Run).where(Run.status == RunStatus.MINTED)).all()
    assert len(leased) == 10 and len(minted) == 2
    # A run of acme's is not globex's to register.
    with pytest.raises(RunNotFound):
        keys.register(
            globex,
            first[0].run_id,
            token_id="tok1",
            wrapped_recording_key=bytes(80),
            store="s3://b/p",
            service="svc",
            host="h",
        )


def test_every_run_gets_its_own_key_pair(service: tuple[KeyService, list[int]]) -> None:
    keys, (acme, globex) = service
    leases = keys.lease(acme, "tok1", 5, mint_batch=2)  # minted in a batch of 5
    leases += keys.lease(acme, "tok1", 3, mint_batch=2)  # a batch of 2 after the one left
    leases += keys.lease(globex, "tok2", 3, mint_batch=3)
    keys.mint(acme, 4)  # and some nobody leased yet
    publics = [lease.public_key for lease in leases]
    assert len(set(publics)) == len(publics) == 11, "a public key was handed out twice"
    with keys.factory() as db:
        runs = list(db.scalars(select(Run)))
    assert len(runs) == 15 and len({run.public_key for run in runs}) == 15
    # Each public key is its own private key's, and no two private keys are one.
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    privates = [_private_of(keys, run) for run in runs]
    for run, private in zip(runs, privates, strict=True):
        derived = X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()
        assert derived == run.public_key
    assert len(set(privates)) == len(runs)


def test_a_run_moves_forward_only(service: tuple[KeyService, list[int]]) -> None:
    keys, (acme, _) = service
    (lease,) = keys.lease(acme, "tok", 1, mint_batch=1)
    with pytest.raises(KeyServiceError, match="80 bytes"):
        keys.register(
            acme,
            lease.run_id,
            token_id="tok",
            wrapped_recording_key=b"short",
            store="s",
            service="s",
            host="h",
        )
    run = keys.register(
        acme,
        lease.run_id,
        token_id="tok",
        wrapped_recording_key=bytes(80),
        store="s3://b/p",
        service="checkout",
        host="web-1",
    )
    assert run.status is RunStatus.RECORDING and run.started is not None
    with pytest.raises(KeyServiceError, match="not leased"):
        keys.register(
            acme,
            lease.run_id,
            token_id="tok",
            wrapped_recording_key=bytes(80),
            store="s",
            service="s",
            host="h",
        )
    with pytest.raises(KeyServiceError, match="complete, incomplete or failed"):
        keys.finish(acme, lease.run_id, RunStatus.RECORDING, token_id="tok")
    done = keys.finish(acme, lease.run_id, RunStatus.COMPLETE, token_id="tok", exit_status=0)
    assert done.status is RunStatus.COMPLETE and done.ended is not None
    with pytest.raises(KeyServiceError, match="already finished"):
        keys.finish(acme, lease.run_id, RunStatus.FAILED, token_id="tok")
    with pytest.raises(RunNotFound):
        keys.finish(acme, "run-nope", RunStatus.FAILED, token_id="tok")


def test_only_the_leasing_token_registers_and_finishes_a_run(
    service: tuple[KeyService, list[int]],
) -> None:
    keys, (acme, _) = service
    (lease,) = keys.lease(acme, "tok", 1, mint_batch=2)
    (unleased,) = keys.mint(acme, 1)
    for run_id in (lease.run_id, unleased):
        with pytest.raises(RunNotFound):
            keys.register(acme, run_id, token_id="other", wrapped_recording_key=bytes(80),
                          store="s3://b/p", service="svc", host="h")  # fmt: skip
        with pytest.raises(RunNotFound):
            keys.finish(acme, run_id, RunStatus.FAILED, token_id="other")
    with keys.factory() as db:
        run = db.get(Run, lease.run_id)
        assert run is not None and run.status is RunStatus.LEASED and run.store is None
    # Control: the leasing token does both.
    keys.register(acme, lease.run_id, token_id="tok", wrapped_recording_key=bytes(80),
                  store="s3://b/p", service="svc", host="h")  # fmt: skip
    with pytest.raises(RunNotFound):
        keys.finish(acme, lease.run_id, RunStatus.COMPLETE, token_id="other")
    assert keys.finish(acme, lease.run_id, RunStatus.COMPLETE, token_id="tok").status is (
        RunStatus.COMPLETE
    )


def test_the_recording_key_reaches_one_agent_for_one_session(
    service: tuple[KeyService, list[int]], tmp_path: Path
) -> None:
    keys, (acme, _) = service
    (lease,) = keys.lease(acme, "tok", 1, mint_batch=1)
    sink = LocalDirStore(tmp_path / "rec")
    with SealedWriter(sink, Recipient.from_raw(lease.public_key), lease.run_id) as writer:
        writer.write(b"the run's events")
    header = RecordingHeader.decode((tmp_path / "rec" / "header").read_bytes())
    keys.register(acme, lease.run_id, token_id="tok", wrapped_recording_key=header.wrapped_key,
                  store=str(tmp_path / "rec"), service="checkout", host="web-1")  # fmt: skip
    agent, other_agent = generate_identity(), generate_identity()
    blob = keys.seal_for_agent(acme, lease.run_id, agent.recipient.raw, "sess-1")
    bound = {"store": str(tmp_path / "rec"), "wrapped_key": header.wrapped_key}
    recording_key = open_session_key(blob, agent, session_id="sess-1", run_id=lease.run_id,
                                     **bound)  # type: ignore[arg-type]  # fmt: skip
    # The key the recording was sealed with, as the run's own identity recovers it.
    with keys.factory() as db:
        run = db.get(Run, lease.run_id)
        assert run is not None
        from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

        identity = Identity(X25519PrivateKey.from_private_bytes(_private_of(keys, run)))
    with unwrap_recording_key(header.wrapped_key, identity, lease.run_id) as expected:
        assert recording_key.view() == expected.view()
    assert bytes(recording_key.view()) not in blob
    # Nobody else opens it: another agent, another session, another run, an altered blob.
    for who, session, run_id, sealed in (
        (other_agent, "sess-1", lease.run_id, blob),
        (agent, "sess-2", lease.run_id, blob),
        (agent, "sess-1", "run-other", blob),
        (agent, "sess-1", lease.run_id, blob[:-1] + bytes([blob[-1] ^ 1])),
    ):
        with pytest.raises(WrongIdentityError):
            open_session_key(sealed, who, session_id=session, run_id=run_id,
                             **bound)  # type: ignore[arg-type]  # fmt: skip
    # Each session gets its own blob (fresh HPKE encapsulation).
    assert keys.seal_for_agent(acme, lease.run_id, agent.recipient.raw, "sess-1") != blob


def test_resealing_wipes_the_run_key_and_the_recording_key(
    service: tuple[KeyService, list[int]], tmp_path: Path, secrets_made: list[Any]
) -> None:
    keys, (acme, _) = service
    (lease,) = keys.lease(acme, "tok", 1, mint_batch=1)
    with SealedWriter(LocalDirStore(tmp_path / "rec"), Recipient.from_raw(lease.public_key),
                      lease.run_id) as writer:  # fmt: skip
        writer.write(b"the run's events")
    header = RecordingHeader.decode((tmp_path / "rec" / "header").read_bytes())
    keys.register(acme, lease.run_id, token_id="tok", wrapped_recording_key=header.wrapped_key,
                  store=str(tmp_path / "rec"), service="checkout", host="web-1")  # fmt: skip
    agent = generate_identity()
    secrets_made.clear()
    blob = keys.seal_for_agent(acme, lease.run_id, agent.recipient.raw, "sess-1")
    # The run's private key (from KMS) and the recording key (from the header), both zero.
    assert [len(secret) for secret in secrets_made] == [32, 32]
    assert wiped(secrets_made)
    # Control: the blob carries the recording's key.
    bound = {"store": str(tmp_path / "rec"), "wrapped_key": header.wrapped_key}
    with open_session_key(blob, agent, session_id="sess-1", run_id=lease.run_id,
                          **bound) as key:  # type: ignore[arg-type]  # fmt: skip
        assert SealedReader(LocalDirStore(tmp_path / "rec"), None,
                            recording_key=key).read_all() == b"the run's events"  # fmt: skip


def test_kms_refusing_is_one_clear_error(
    service: tuple[KeyService, list[int]], kms: tuple[Any, str]
) -> None:
    keys, (acme, _) = service
    client, _key_id = kms
    # A key KMS does not have (deleted, or a wrong alias in the settings).
    refused = KeyService(keys.factory, KmsKeyWrapper(client, "alias/no-such-key"))
    with pytest.raises(KeyServiceError, match="KMS refused to wrap a run key: NotFoundException"):
        refused.mint(acme, 1)
    with keys.factory() as db:
        assert db.scalars(select(Run)).first() is None  # nothing half-minted
    # Control: the configured key mints.
    assert len(keys.mint(acme, 1)) == 1
