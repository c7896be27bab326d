"""The v1 API for sessions (people) and agents. Each route names its permission in OpenAPI's
`x-permission`. A session is its opener's: anyone else (another tenant, or another user of
the same tenant) gets 404, as for a session that does not exist. An agent enrolls once, with
a one-time enrollment minted for it (sealtrace.server._enrollment), and then acts with its
own credential, as itself only: it reaches only the session it was assigned.

Opening a session, each question and closing one append an audit event whatever their end
(sealtrace.server._session_actions, which the console calls too): `ok`, `failed` (the action
was tried and did not work: no agent, KMS, the agent, a timeout, a session not ready) or
`denied` (refused before anything was tried: no such run or session for this user, a
question that does not parse). The event's details are the server's own words, never the
question's text or an answer."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, HTTPException, Response, status
from pydantic import BaseModel, Field, field_validator

from sealtrace.proxy.format import valid_process_path
from sealtrace.sandbox.questions import json_schema

from . import _session_actions as actions
from ._auth import Principal
from ._deps import DB, AsAgent, Presented, ServicesDep, needs, require
from ._enrollment import enroll, mint
from ._errors import (
    ActionRefused,
    EnrollmentRefused,
    SessionClosed,
    SessionMoveRefused,
    SessionNotFound,
)
from ._models import PlatformSession, Scope

__all__ = ["router"]

router = APIRouter(prefix="/v1")

# 422 by number: Starlette renamed its constant (ENTITY, then CONTENT) across versions.
UNPROCESSABLE = 422


class SessionView(BaseModel):
    session_id: str
    run_id: str
    process: str  # "" the recorded process, else the forked one it replays ("1", "1.2")
    status: str  # assigned, ready, closed, failed
    opened: dt.datetime
    closed: dt.datetime | None
    detail: str | None


def _view(session: PlatformSession) -> SessionView:
    return SessionView(
        session_id=session.id,
        run_id=session.run_id,
        process=session.process,
        status=session.status,
        opened=session.opened,
        closed=session.closed,
        detail=session.detail,
    )


class OpenSession(BaseModel):
    run_id: str = Field(max_length=64)
    # A process the recorded one forked, by its path (`sealtrace inspect` lists them).
    process: str = Field(default="", max_length=100)

    @field_validator("process")
    @classmethod
    def _a_path(cls, value: str) -> str:
        if not valid_process_path(value):
            raise ValueError('a process path is "" or "1", "1.2", ... (numbers from 1)')
        return value


def _refused(exc: ActionRefused) -> HTTPException:
    return HTTPException(exc.status, exc.detail, headers=exc.headers or None)


@router.post("/sessions", tags=["sessions"], status_code=201,
             openapi_extra=needs("sessions:open"))  # fmt: skip
def open_session(
    body: OpenSession,
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("sessions:open"))],
) -> SessionView:
    """Open a replay session on a recorded run: an idle agent is assigned and sent the
    run's key sealed to it. Poll the session until it is `ready`."""
    try:
        return _view(actions.open_session(services, who, body.run_id, body.process))
    except ActionRefused as exc:
        raise _refused(exc) from None


def _agents_session(
    services: Any, who: Principal, agent_id: str, session_id: str
) -> PlatformSession:
    """The session, if it is this agent's (404 otherwise, as for any other tenant's)."""
    try:
        session: PlatformSession = services.sessions.get(who.tenant_id, session_id, user_id=None)
    except SessionNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    if session.agent_id != agent_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}")
    return session


@router.get("/sessions/{session_id}", tags=["sessions"],
            openapi_extra=needs("sessions:query"))  # fmt: skip
def get_session(
    session_id: str,
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("sessions:query"))],
) -> SessionView:
    try:
        return _view(actions.users_session(services, who, session_id))
    except ActionRefused as exc:
        raise _refused(exc) from None


# The request body is a question of the contract (sealtrace.sandbox.questions): validated
# there, published from its schema, relayed as it parses. Nothing here names its fields.
_QUESTION_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": json_schema()["question"]}},
    }
}


@router.post("/sessions/{session_id}/queries", tags=["sessions"],
             openapi_extra={**needs("sessions:query"), **_QUESTION_BODY})  # fmt: skip
def ask(
    session_id: str,
    body: Annotated[dict[str, Any], Body()],
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("sessions:query"))],
) -> dict[str, Any]:
    """Ask the session's sandbox; the answer is the document `sealtrace trace|flows|
    inspect-stack|replay --json` prints (`source`: a recorded file's text). It passes through
    this server's memory only."""
    try:
        return actions.ask(services, who, session_id, body)
    except ActionRefused as exc:
        raise _refused(exc) from None


@router.post("/sessions/{session_id}/close", tags=["sessions"],
             openapi_extra=needs("sessions:query"))  # fmt: skip
def close_session(
    session_id: str,
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("sessions:query"))],
) -> SessionView:
    try:
        return _view(actions.close_session(services, who, session_id))
    except ActionRefused as exc:
        raise _refused(exc) from None


# -- agents ------------------------------------------------------------------------------


class EnrollmentRequest(BaseModel):
    # Seconds the enrollment may wait for its agent (the server's enrollment_ttl if not given).
    ttl: float | None = Field(default=None, gt=0, le=86400)


class EnrollmentView(BaseModel):
    enrollment: str  # ste_<id>_<secret>: shown once, for one agent's SEALTRACE_AGENT_ENROLLMENT
    enrollment_id: str
    expires: dt.datetime


@router.post("/agents/enrollments", tags=["agents"], status_code=201,
             openapi_extra=needs("agents:enroll"))  # fmt: skip
def mint_enrollment(
    db: DB,
    services: ServicesDep,
    who: Annotated[Principal, Depends(require("agents:enroll"))],
    body: EnrollmentRequest | None = None,
) -> EnrollmentView:
    """A one-time credential that enrolls one agent of the caller's tenant: whatever starts
    an agent mints one for it. Only its digest is kept; its first use consumes it."""
    seconds = body.ttl if body is not None and body.ttl is not None else None
    ttl = dt.timedelta(seconds=seconds or services.settings.enrollment_ttl)
    made = mint(db, services.token_key, tenant_id=who.tenant_id, minted_by=who.name, ttl=ttl)
    db.commit()
    services.audit(who, "agent.enrollment.mint", f"enrollment:{made.enrollment_id}", "ok",
                   f"expires {made.expires.isoformat(timespec='seconds')}")  # fmt: skip
    return EnrollmentView(enrollment=made.credential, enrollment_id=made.enrollment_id,
                          expires=made.expires)  # fmt: skip


class AgentHello(BaseModel):
    public_key: str  # raw X25519, base64, made at the agent's boot


class AgentView(BaseModel):
    agent_id: str
    queue: str
    credential: str  # st_<id>_<secret>: this agent's own, shown once; dies with the agent
    expires: dt.datetime


_REFUSED = "not a valid enrollment credential: unknown, expired or already used"


@router.post("/agents", tags=["agents"], status_code=201,
             openapi_extra=needs("none: a one-time enrollment credential"))  # fmt: skip
def enroll_agent(body: AgentHello, services: ServicesDep, presented: Presented) -> AgentView:
    """An agent booted: with its one-time enrollment as the bearer credential, it gives the
    public key it made at boot and gets its own credential and the queue it will consume.
    An enrollment used before (even at the same moment), expired or unknown is refused with
    401, and audited."""
    try:
        raw = base64.b64decode(body.public_key, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise HTTPException(UNPROCESSABLE, f"public_key: {exc}") from None
    lifetime = dt.timedelta(hours=services.settings.agent_credential_hours)
    try:
        if presented is None:
            raise EnrollmentRefused("no enrollment credential")
        enrolled = enroll(services.factory, services.token_key, presented.credentials, raw,
                          lifetime=lifetime)  # fmt: skip
    except ValueError as exc:
        raise HTTPException(UNPROCESSABLE, f"public_key: {exc}") from None
    except EnrollmentRefused as exc:
        services.audit(None, "agent.enroll", f"enrollment:{exc.enrollment_id or '-'}",
                       "denied", str(exc), tenant_id=exc.tenant_id)  # fmt: skip
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, _REFUSED,
                            headers={"WWW-Authenticate": "Bearer"}) from None  # fmt: skip
    agent = Principal(enrolled.token_id, enrolled.tenant_id, Scope.AGENT,
                      agent_id=enrolled.agent_id)  # fmt: skip
    services.audit(agent, "agent.enroll", f"enrollment:{enrolled.enrollment_id}", "ok")
    return AgentView(agent_id=enrolled.agent_id, queue=enrolled.queue,
                     credential=enrolled.credential, expires=enrolled.expires)  # fmt: skip


@router.post("/agents/{agent_id}/heartbeat", tags=["agents"], status_code=204,
             openapi_extra=needs("agents:serve"))  # fmt: skip
def heartbeat(
    agent_id: str,
    services: ServicesDep,
    who: AsAgent,
) -> Response:
    try:
        agent = services.sessions.heartbeat(who.tenant_id, agent_id)
    except SessionNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    if agent.status == "gone":  # retired (its session ended without it): it should exit
        raise HTTPException(status.HTTP_410_GONE, "this agent is retired: exit")
    return Response(status_code=204)


class AgentState(BaseModel):
    state: Literal["ready", "failed", "closed"]
    detail: str = Field(default="", max_length=2000)


@router.post("/agents/{agent_id}/sessions/{session_id}/state", tags=["agents"],
             openapi_extra=needs("agents:serve"))  # fmt: skip
def session_state(
    agent_id: str,
    session_id: str,
    body: AgentState,
    services: ServicesDep,
    who: AsAgent,
) -> SessionView:
    try:
        session = services.sessions.agent_state(who.tenant_id, agent_id, session_id,
                                                body.state, body.detail)  # fmt: skip
    except SessionNotFound as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except SessionMoveRefused as exc:
        services.audit(who, f"session.{body.state}", session_id, "denied", str(exc))
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    services.audit(who, f"session.{body.state}", session_id,
                   "failed" if body.state == "failed" else "ok", body.detail)  # fmt: skip
    return _view(session)


@router.get("/agents/{agent_id}/sessions/{session_id}/next", tags=["agents"],
            openapi_extra=needs("agents:serve"))  # fmt: skip
def next_question(
    agent_id: str,
    session_id: str,
    services: ServicesDep,
    who: AsAgent,
    wait: float = 20.0,
) -> Response:
    """The next question for the agent (long poll); 204 when none came in `wait` seconds.
    `{"kind": "close"}` ends the session."""
    import json

    _agents_session(services, who, agent_id, session_id)
    try:
        question = services.relay.next(session_id, min(max(wait, 0.0), 30.0))
    except SessionClosed:
        return Response(json.dumps({"id": 0, "request": {"kind": "close"}}),
                        media_type="application/json")  # fmt: skip
    if question is None:
        return Response(status_code=204)
    return Response(json.dumps({"id": question.id, "request": question.request}),
                    media_type="application/json")  # fmt: skip


class Answer(BaseModel):
    document: dict[str, Any] | None = None
    error: str | None = None
    status: int | None = None  # the HTTP status the user's request gets with `error`


@router.post("/agents/{agent_id}/sessions/{session_id}/answers/{question_id}", tags=["agents"],
             status_code=204, openapi_extra=needs("agents:serve"))  # fmt: skip
def answer(
    agent_id: str,
    session_id: str,
    question_id: int,
    body: Answer,
    services: ServicesDep,
    who: AsAgent,
) -> Response:
    _agents_session(services, who, agent_id, session_id)
    found = body.model_dump(exclude_none=True)
    if not services.relay.answer(session_id, question_id, found):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no open question {question_id}")
    return Response(status_code=204)
