"""The key service: per-run X25519 key pairs, their private halves wrapped by KMS, public
halves leased to recorders in batches, runs registered and finished (only by the token the
run's key was leased to), and a run's recording key re-sealed to one agent for one session.

Seams: `KeyWrapper` is the KMS (KmsKeyWrapper: AWS KMS in production, moto's server
locally); the encryption context {tenant, run, purpose} is part of every wrap, so a
ciphertext moved to another row does not unwrap. The service never logs, stores or returns
a private key or a recording key in the clear: minting wraps at once, and a session's key
leaves only sealed to the agent.

Key hygiene (docs/platform.md): an unwrapped run private key and a recording key being
re-sealed are held in `Secret` buffers, wiped in a `finally` before seal_for_agent returns.
What is out of reach, and so only freed: botocore's copies of KMS's plaintext (its response
body, base64 in JSON, and the bytes it decodes), cryptography's bytes of a key HPKE decrypts,
the copy its X25519 key object keeps in OpenSSL while it lives, and at minting the bytes of
private_bytes_raw() and of KMS's request body.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from sealtrace.proxy.format import (
    ENC_SIZE,
    WRAPPED_KEY_SIZE,
    Identity,
    Recipient,
    Secret,
    seal_session_key,
    unwrap_recording_key,
)

from ._errors import KeyServiceError, RunNotFound
from ._models import Run, RunStatus, owned

__all__ = ["KeyService", "KeyWrapper", "KmsKeyWrapper", "Lease"]

PURPOSE = "run-private-key"


class KeyWrapper(Protocol):
    def wrap(self, plaintext: bytes, context: dict[str, str]) -> bytes: ...
    def unwrap(self, ciphertext: bytes, context: dict[str, str]) -> Secret:
        """The plaintext, in a Secret the caller wipes."""
        ...


class KmsKeyWrapper:
    """A KMS symmetric key: Encrypt and Decrypt with an encryption context."""

    def __init__(self, client: Any, key_id: str) -> None:
        self.client = client
        self.key_id = key_id

    def wrap(self, plaintext: bytes, context: dict[str, str]) -> bytes:
        try:
            out = self.client.encrypt(
                KeyId=self.key_id, Plaintext=plaintext, EncryptionContext=context
            )
        except Exception as exc:  # botocore's ClientError and connection errors alike
            raise KeyServiceError(f"KMS refused to wrap a run key: {_reason(exc)}") from None
        return bytes(out["CiphertextBlob"])

    def unwrap(self, ciphertext: bytes, context: dict[str, str]) -> Secret:
        try:
            out = self.client.decrypt(
                KeyId=self.key_id, CiphertextBlob=ciphertext, EncryptionContext=context
            )
        except Exception as exc:
            raise KeyServiceError(f"KMS refused to unwrap a run key: {_reason(exc)}") from None
        # botocore's bytes (and the response it parsed them from) cannot be wiped: copied
        # into a Secret and dropped at once.
        return Secret.copy_of(out.pop("Plaintext"))


def _reason(exc: Exception) -> str:
    error = getattr(exc, "response", {}).get("Error", {})
    return str(error.get("Code") or exc.__class__.__name__)


@dataclass(frozen=True)
class Lease:
    run_id: str
    public_key: bytes  # raw X25519


def _context(tenant_id: int, run_id: str) -> dict[str, str]:
    return {"tenant": str(tenant_id), "run": run_id, "purpose": PURPOSE}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class KeyService:
    def __init__(self, factory: sessionmaker[Session], wrapper: KeyWrapper) -> None:
        self.factory = factory
        self.wrapper = wrapper

    def mint(self, tenant_id: int, count: int) -> list[str]:
        """`count` new key pairs for future runs of the tenant; their run ids."""
        rows = []
        for _ in range(count):
            run_id = f"run-{secrets.token_hex(12)}"
            private = X25519PrivateKey.generate()
            rows.append(
                Run(
                    id=run_id,
                    tenant_id=tenant_id,
                    status=RunStatus.MINTED,
                    public_key=private.public_key().public_bytes_raw(),
                    wrapped_private_key=self.wrapper.wrap(
                        private.private_bytes_raw(), _context(tenant_id, run_id)
                    ),
                )
            )
            del private
        with self.factory() as db:
            db.add_all(rows)
            db.commit()
        return [r.id for r in rows]

    def lease(self, tenant_id: int, token_id: str, count: int, mint_batch: int) -> list[Lease]:
        """Hand out `count` public keys, minting a batch first when too few are left."""
        with self.factory() as db:
            available = self._minted(db, tenant_id, count)
        if len(available) < count:
            self.mint(tenant_id, max(mint_batch, count - len(available)))
        with self.factory() as db:
            runs = self._minted(db, tenant_id, count)
            for run in runs:
                run.status = RunStatus.LEASED
                run.leased = _now()
                run.lease_token_id = token_id
            db.commit()
            return [Lease(r.id, r.public_key) for r in runs]

    @staticmethod
    def _minted(db: Session, tenant_id: int, count: int) -> list[Run]:
        query = (
            select(Run)
            .where(Run.tenant_id == tenant_id, Run.status == RunStatus.MINTED)
            .order_by(Run.minted)
            .limit(count)
        )
        if db.bind is not None and db.bind.dialect.name == "postgresql":
            query = query.with_for_update(skip_locked=True)
        return list(db.scalars(query))

    def register(
        self,
        tenant_id: int,
        run_id: str,
        *,
        token_id: str,
        wrapped_recording_key: bytes,
        store: str,
        service: str,
        host: str,
    ) -> Run:
        """A recorder started run `run_id` with the key it leased with token `token_id`: it
        wrote the recording header whose HPKE-wrapped key is `wrapped_recording_key`."""
        if len(wrapped_recording_key) != ENC_SIZE + WRAPPED_KEY_SIZE:
            raise KeyServiceError(f"a wrapped recording key is {ENC_SIZE + WRAPPED_KEY_SIZE} bytes")
        with self.factory() as db:
            run = self._leased_run(db, tenant_id, token_id, run_id)
            if run.status is not RunStatus.LEASED:
                raise KeyServiceError(f"run {run_id} is {run.status.value}, not leased")
            run.status = RunStatus.RECORDING
            run.wrapped_recording_key = wrapped_recording_key
            run.store, run.service, run.host = store, service, host
            run.started = _now()
            db.commit()
            return run

    def finish(
        self,
        tenant_id: int,
        run_id: str,
        status: RunStatus,
        *,
        token_id: str,
        exit_status: int | None = None,
        detail: str = "",
        requests: int | None = None,
    ) -> Run:
        """The run ended; only the token its key was leased to (and so the one that
        registered it) finishes it."""
        if status not in (RunStatus.COMPLETE, RunStatus.INCOMPLETE, RunStatus.FAILED):
            raise KeyServiceError(f"a run finishes complete, incomplete or failed, not {status}")
        with self.factory() as db:
            run = self._leased_run(db, tenant_id, token_id, run_id)
            if run.status not in (RunStatus.RECORDING, RunStatus.LEASED):
                raise KeyServiceError(f"run {run_id} already finished ({run.status.value})")
            run.status = status
            run.ended = _now()
            run.exit_status = exit_status
            run.requests = requests
            run.detail = detail[:2000]
            db.commit()
            return run

    def seal_for_agent(
        self, tenant_id: int, run_id: str, agent_public_key: bytes, session_id: str
    ) -> bytes:
        """The run's recording key, sealed to the agent for this session."""
        with self.factory() as db:
            run = self._run(db, tenant_id, run_id)
            if run.wrapped_recording_key is None:
                raise KeyServiceError(f"run {run_id} has no recording")
            wrapped_private, wrapped_recording = run.wrapped_private_key, run.wrapped_recording_key
            store = run.store or ""
        agent = Recipient.from_raw(agent_public_key)
        with self.wrapper.unwrap(wrapped_private, _context(tenant_id, run_id)) as private:
            identity = Identity(X25519PrivateKey.from_private_bytes(private.view()))
        with unwrap_recording_key(wrapped_recording, identity, run_id) as recording_key:
            del identity
            return seal_session_key(recording_key, agent, session_id=session_id, run_id=run_id,
                                    store=store, wrapped_key=wrapped_recording)  # fmt: skip

    @classmethod
    def _leased_run(cls, db: Session, tenant_id: int, token_id: str, run_id: str) -> Run:
        """The run, if its key was leased to this token: a run leased to another recorder,
        or never leased, is not found, as another tenant's is."""
        run = cls._run(db, tenant_id, run_id)
        if run.lease_token_id is None or not secrets.compare_digest(run.lease_token_id, token_id):
            raise RunNotFound(f"no run {run_id}")
        return run

    @staticmethod
    def _run(db: Session, tenant_id: int, run_id: str) -> Run:
        run = owned(db, Run, run_id, tenant_id)
        if run is None:
            raise RunNotFound(f"no run {run_id}")
        return run
