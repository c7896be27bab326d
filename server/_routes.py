"""The v1 API: sign-in, key leases and run registration for recorders, runs for people, and
the audit log. Each route names the permission it needs (sealtrace.server._auth); OpenAPI
carries it as `x-permission`.

Another tenant's run answers 404, the same as a run that does not exist; so does, to a
recorder, a run whose key was leased to another token.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from ._audit import verify
from ._auth import Principal, issue_token, revoke_token
from ._deps import DB, AuditKeyDep, Keys, ServicesDep, Settings, SignedIn, needs, require
from ._errors import ActionRefused, KeyServiceError, RunNotFound
from ._models import AuditEvent, Run, RunStatus, Scope, Tenant
from ._sign_in import sign_in

__all__ = ["router"]

router = APIRouter(prefix="/v1")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise HTTPException(422, f"{what} is not base64url") from None


# -- sign-in ---------------------------------------------------------------------------


class Login(BaseModel):
    tenant: str = Field(max_length=100)
    user: str = Field(max_length=100)
    password: str = Field(max_length=1000)


class Token(BaseModel):
    token: str
    expires: dt.datetime
    role: str


@router.post("/auth/login", tags=["auth"], openapi_extra=needs("none: a password signs in"))
def login(
    body: Login, request: Request, db: DB, services: ServicesDep, settings: Settings
) -> Token:
    """Exchange a tenant, user name and password for a user token (its role decides).
    Repeated failures are refused with 429 for a while (server/_login_limit.py); an unknown
    user costs the same work as a wrong password."""
    try:
        user = sign_in(services, db, tenant=body.tenant, user=body.user,
                       password=body.password, address=_address(request))  # fmt: skip
    except ActionRefused as exc:
        raise HTTPException(exc.status, exc.detail, headers=exc.headers or None) from None
    lifetime = dt.timedelta(hours=settings.user_token_hours)
    token = issue_token(db, services.token_key, tenant_id=user.tenant_id, scope=Scope.USER,
                        name="login", user=user, lifetime=lifetime)  # fmt: skip
    db.commit()
    return Token(token=token, expires=dt.datetime.now(dt.UTC) + lifetime, role=user.role.value)


def _address(request: Request) -> str:
    """The connection's peer (behind a proxy, the proxy's): what sign-in failures count by."""
    return request.client.host if request.client else "unknown"


@router.post("/auth/logout", tags=["auth"], status_code=204,
             openapi_extra=needs("none: a user token revokes itself"))  # fmt: skip
def logout(db: DB, services: ServicesDep, who: SignedIn) -> Response:
    """Revoke the login token this request carries: it stops working at once."""
    if who.scope is not Scope.USER:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "only a login token logs out")
    revoke_token(db, who.token_id)
    db.commit()
    services.audit(who, "logout", f"user:{who.user_name}", "ok")
    return Response(status_code=204)


# -- recorders ---------------------------------------------------------------------------


class LeaseRequest(BaseModel):
    count: int = Field(default=8, ge=1, le=256)


class LeasedKey(BaseModel):
    run_id: str
    public_key: str  # raw X25519, base64url
    store: str | None = None  # where the run goes, unless the recorder was told otherwise


@router.post("/keys/lease", tags=["recorders"], openapi_extra=needs("keys:lease"))
def lease_keys(
    body: LeaseRequest,
    db: DB,
    keys: Keys,
    services: ServicesDep,
    settings: Settings,
    who: Annotated[Principal, Depends(require("keys:lease"))],
) -> list[LeasedKey]:
    """Public keys for the recorder's next runs (each handed out once)."""
    try:
        leases = keys.lease(who.tenant_id, who.token_id, body.count, settings.mint_batch)
    except KeyServiceError as exc:
        services.audit(who, "keys.lease", f"{body.count} keys", "failed", str(exc))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None
    services.audit(who, "keys.lease", f"{len(leases)} keys", "ok")
    store = None
    if settings.store:
        tenant = db.get(Tenant, who.tenant_id)
        store = f"{settings.store.rstrip('/')}/{tenant.name if tenant else who.tenant_id}"
    return [
        LeasedKey(run_id=lease.run_id, public_key=_b64(lease.public_key), store=store)
        for lease in leases
    ]


class Registration(BaseModel):
    wrapped_recording_key: str  # the recording header's HPKE-wrapped key, base64url
    store: str = Field(max_length=500)
    service: str = Field(max_length=200)
    host: str = Field(max_length=200)


class RunView(BaseModel):
    run_id: str
    status: str
    service: str | None
    host: str | None
    store: str | None
    started: dt.datetime | None
    ended: dt.datetime | None
    exit_status: int | None
    requests: int | None = None  # the request index's size, as the recorder reported it


def _view(run: Run) -> RunView:
    return RunView(run_id=run.id, status=run.status.value, service=run.service, host=run.host,
                   store=run.store, started=run.started, ended=run.ended,
                   exit_status=run.exit_status, requests=run.requests)  # fmt: skip


def _not_found(exc: RunNotFound) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, str(exc))


@router.post("/runs/{run_id}/register", tags=["recorders"], openapi_extra=needs("runs:register"))
def register_run(
    run_id: str,
    body: Registration,
    keys: Keys,
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("runs:register"))],
) -> RunView:
    """A recorder started a run with a leased key and wrote its header."""
    wrapped = _unb64(body.wrapped_recording_key, "wrapped_recording_key")
    try:
        run = keys.register(who.tenant_id, run_id, token_id=who.token_id,
                            wrapped_recording_key=wrapped,
                            store=body.store, service=body.service, host=body.host)  # fmt: skip
    except RunNotFound as exc:
        raise _not_found(exc) from None
    except KeyServiceError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    services.audit(who, "run.register", run_id, "ok")
    return _view(run)


class Finish(BaseModel):
    status: Literal["complete", "incomplete", "failed"]
    exit_status: int | None = None
    detail: str = Field(default="", max_length=2000)
    requests: int | None = Field(default=None, ge=0, le=1_000_000_000)


@router.post("/runs/{run_id}/finish", tags=["recorders"], openapi_extra=needs("runs:register"))
def finish_run(
    run_id: str,
    body: Finish,
    keys: Keys,
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("runs:register"))],
) -> RunView:
    """The run ended: complete, incomplete (the recording stopped early) or failed."""
    try:
        run = keys.finish(who.tenant_id, run_id, RunStatus(body.status), token_id=who.token_id,
                          exit_status=body.exit_status, detail=body.detail,
                          requests=body.requests)  # fmt: skip
    except RunNotFound as exc:
        raise _not_found(exc) from None
    except KeyServiceError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    services.audit(who, "run.finish", run_id, "ok", body.status)
    return _view(run)


# -- people ------------------------------------------------------------------------------

_RECORDED = (RunStatus.RECORDING, RunStatus.COMPLETE, RunStatus.INCOMPLETE, RunStatus.FAILED)


@router.get("/runs", tags=["runs"], openapi_extra=needs("runs:read"))
def list_runs(
    db: DB, who: Annotated[Principal, Depends(require("runs:read"))], limit: int = 100
) -> list[RunView]:
    """The tenant's runs that started recording (or failed to), newest first."""
    runs = db.scalars(
        select(Run).where(Run.tenant_id == who.tenant_id, Run.status.in_(_RECORDED))
        .order_by(func.coalesce(Run.started, Run.ended, Run.leased).desc())
        .limit(min(max(limit, 1), 1000))
    )  # fmt: skip
    return [_view(run) for run in runs]


@router.get("/runs/{run_id}", tags=["runs"], openapi_extra=needs("runs:read"))
def get_run(
    run_id: str, db: DB, who: Annotated[Principal, Depends(require("runs:read"))]
) -> RunView:
    run = db.get(Run, run_id)
    if run is None or run.tenant_id != who.tenant_id or run.status not in _RECORDED:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id}")
    return _view(run)


class AuditView(BaseModel):
    seq: int
    at: dt.datetime
    actor: str
    action: str
    target: str
    result: str
    detail: str
    digest: str


class AuditChain(BaseModel):
    rows: int
    whole: bool
    problems: list[str]
    # The chain's last row (its digest and position in the tenant's chain): anchor them
    # elsewhere to notice a tail cut back to an earlier row, which no MAC can show.
    head: str | None
    head_seq: int


@router.get("/audit", tags=["audit"], openapi_extra=needs("audit:read"))
def audit_log(
    db: DB, who: Annotated[Principal, Depends(require("audit:read"))], after: int = 0,
    limit: int = 100,
) -> list[AuditView]:  # fmt: skip
    """The tenant's audit events, oldest first, after sequence number `after`."""
    rows = db.scalars(
        select(AuditEvent).where(AuditEvent.tenant_id == who.tenant_id, AuditEvent.seq > after)
        .order_by(AuditEvent.seq).limit(min(max(limit, 1), 1000))
    )  # fmt: skip
    return [
        AuditView(seq=r.seq, at=r.at, actor=r.actor, action=r.action, target=r.target,
                  result=r.result, detail=r.detail, digest=r.digest.hex())
        for r in rows
    ]  # fmt: skip


@router.get("/audit/verify", tags=["audit"], openapi_extra=needs("audit:read"))
def audit_verify(
    db: DB, key: AuditKeyDep, who: Annotated[Principal, Depends(require("audit:read"))]
) -> AuditChain:
    """Check the tenant's chain: its rows' digests, and its head's MAC under the audit key.
    Other tenants' rows are neither checked nor counted (the operator's `sealtrace server
    audit-verify` checks every chain)."""
    verdict = verify(db, key, tenant_id=who.tenant_id)
    head = verdict.heads[0] if verdict.heads else None
    return AuditChain(rows=verdict.rows, whole=verdict.whole,
                      problems=[f"row {p.seq}: {p.why}" for p in verdict.problems],
                      head=head.digest.hex() if head else None,
                      head_seq=head.chain_seq if head else 0)  # fmt: skip
