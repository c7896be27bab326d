"""Sessions: an authorised user opens one on a run, the server picks an enrolled, live, idle
agent of the tenant (sealtrace.server._enrollment: one whose own credential still holds,
heard from in the last AGENT_FRESH), re-seals the run's recording key to that agent
(sealtrace.server._key_service) and, after the database commit, hands the assignment to the
agent's own queue. Only the sealed key crosses the queue. Questions and answers then go
through the relay (sealtrace.server._relay).

Seams: `Dispatcher` is the task queue (Celery on Redis: CeleryDispatcher).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import secrets
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session as DbSession
from sqlalchemy.orm import sessionmaker

from sealtrace.agent import ASSIGNMENT_TASK

from ._enrollment import assignable, retire
from ._errors import (
    DispatchError,
    KeyServiceError,
    NoAgent,
    RunNotFound,
    SessionMoveRefused,
    SessionNotFound,
)
from ._key_service import KeyService
from ._models import Agent, PlatformSession, Run, RunStatus, owned
from ._relay import Relay

__all__ = ["AGENT_FRESH", "CeleryDispatcher", "Dispatcher", "SessionService"]

AGENT_FRESH = dt.timedelta(seconds=30)  # an idle agent heard from this recently is alive
_OPENABLE = (RunStatus.COMPLETE, RunStatus.INCOMPLETE)
# What an agent may report, and the states its session may be in for that: assigned →
# ready → closed or failed, and assigned → failed. An ended session stays ended.
_AGENT_MOVES = {"ready": ("assigned",), "failed": ("assigned", "ready"), "closed": ("ready",)}


class Dispatcher(Protocol):
    def send(self, queue: str, assignment: dict[str, Any]) -> None: ...


class CeleryDispatcher:
    """Assignments as Celery tasks on Redis, one queue per agent."""

    def __init__(self, broker_url: str) -> None:
        from celery import Celery

        self.app = Celery("sealtrace-server", broker=broker_url)
        # Fail at once when Redis is away: the session fails cleanly instead of hanging.
        self.app.conf.update(
            broker_connection_retry_on_startup=True,
            task_serializer="json",
            task_publish_retry=False,
            broker_connection_timeout=3,
        )

    def send(self, queue: str, assignment: dict[str, Any]) -> None:
        self.app.send_task(ASSIGNMENT_TASK, kwargs=assignment, queue=queue)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class SessionService:
    def __init__(
        self,
        factory: sessionmaker[DbSession],
        keys: KeyService,
        relay: Relay,
        dispatcher: Dispatcher,
        *,
        assign_timeout: float = 180.0,
    ) -> None:
        self.assign_timeout = dt.timedelta(seconds=assign_timeout)
        self.factory = factory
        self.keys = keys
        self.relay = relay
        self.dispatcher = dispatcher

    # -- agents (they enroll through sealtrace.server._enrollment) --------------------------

    def heartbeat(self, tenant_id: int, agent_id: str) -> Agent:
        with self.factory() as db:
            agent = self._agent(db, tenant_id, agent_id)
            agent.seen = _now()
            db.commit()
            return agent

    def agent_left(self, tenant_id: int, agent_id: str) -> None:
        """The agent is gone without a session to end: retired, its credential revoked."""
        with self.factory() as db:
            retire(db, self._agent(db, tenant_id, agent_id))
            db.commit()

    # -- sessions -------------------------------------------------------------------------

    def open(self, tenant_id: int, user_id: int, run_id: str, process: str = "") -> PlatformSession:
        """Assign an enrolled, live, idle agent; KeyServiceError if KMS refuses (the session is
        then failed), NoAgent if there is none, RunNotFound for a run that is not this
        tenant's."""
        session_id = f"sess-{secrets.token_hex(12)}"
        with self.factory() as db:
            run = db.get(Run, run_id)
            if run is None or run.tenant_id != tenant_id or run.status not in _OPENABLE:
                raise RunNotFound(f"no recorded run {run_id}")
            agent = self._idle_agent(db, tenant_id)
            if agent is None:
                raise NoAgent(
                    "no idle agent: start one (sealtrace launch-agent, or sealtrace "
                    "agent with an enrollment)"
                )
            agent.status = "busy"
            session = PlatformSession(id=session_id, tenant_id=tenant_id, run_id=run_id,
                              user_id=user_id, agent_id=agent.id, status="assigned",
                              process=process)  # fmt: skip
            db.add(session)
            db.commit()
            store, queue, public_key = run.store, agent.queue, agent.public_key
        try:
            sealed = self.keys.seal_for_agent(tenant_id, run_id, public_key, session_id)
        except KeyServiceError as exc:
            self._end(tenant_id, session_id, "failed", str(exc), agent_after="idle")
            raise
        self.relay.open(session_id)
        try:
            self.dispatcher.send(
                queue,
                {"session_id": session_id, "run_id": run_id, "store": store,
                 "sealed_key": base64.b64encode(sealed).decode(), "process": process},
            )  # fmt: skip
        except Exception as exc:  # kombu's and redis's connection errors alike
            self._end(tenant_id, session_id, "failed", "the task queue is unreachable",
                      agent_after="idle")  # fmt: skip
            raise DispatchError(
                f"the task queue is unreachable ({exc.__class__.__name__})"
            ) from None
        return session

    def _idle_agent(self, db: DbSession, tenant_id: int) -> Agent | None:
        """The tenant's idle agent heard from most recently, among those that enrolled and
        whose own credential is still valid: nobody else's key is ever sealed to."""
        now = _now()
        query = (
            select(Agent)
            .where(Agent.tenant_id == tenant_id, Agent.status == "idle",
                   Agent.seen >= now - AGENT_FRESH, assignable(now))
            .order_by(Agent.seen.desc())
            .limit(1)
        )  # fmt: skip
        if db.bind is not None and db.bind.dialect.name == "postgresql":
            query = query.with_for_update(of=Agent, skip_locked=True)
        return db.scalars(query).first()

    def get(self, tenant_id: int, session_id: str, *, user_id: int | None) -> PlatformSession:
        """The session, if it is `user_id`'s (None: the caller is its agent, which the
        caller checks); one its agent never took up within `assign_timeout` has failed."""
        with self.factory() as db:
            session = self._session(db, tenant_id, session_id, user_id)
        if session.status == "assigned" and _now() - session.opened > self.assign_timeout:
            return self._end(tenant_id, session_id, "failed",
                             "no agent took the session up in time")  # fmt: skip
        return session

    def agent_state(
        self, tenant_id: int, agent_id: str, session_id: str, state: str, detail: str = ""
    ) -> PlatformSession:
        """The agent reports its session ready, failed or closed. Only the moves in
        _AGENT_MOVES happen; reporting the state the session is already in changes nothing
        (a retry, or the agent acknowledging a user's close); anything else is
        SessionMoveRefused and leaves the session as it was."""
        if state not in _AGENT_MOVES:
            raise ValueError(f"an agent reports ready, failed or closed, not {state!r}")
        with self.factory() as db:
            # Locked (PostgreSQL) so a user's close cannot slip between check and move.
            session = db.get(PlatformSession, session_id, with_for_update=True)
            if session is None or session.tenant_id != tenant_id or session.agent_id != agent_id:
                raise SessionNotFound(f"no session {session_id} for this agent")
            if session.status == state:
                return session
            if session.status not in _AGENT_MOVES[state]:
                raise SessionMoveRefused(
                    f"the session is {session.status}: it cannot become {state}"
                )
            if state == "ready":
                session.status = "ready"
                db.commit()
                return session
            return self._end(tenant_id, session_id, state, detail, db=db)

    def fail(self, tenant_id: int, session_id: str, detail: str) -> PlatformSession:
        """The server gives up on the session (its agent went silent); an ended one stays
        as it ended."""
        return self._end(tenant_id, session_id, "failed", detail)

    def close(self, tenant_id: int, user_id: int, session_id: str) -> PlatformSession:
        """The user ends their session (SessionNotFound for anyone else's)."""
        with self.factory() as db:
            self._session(db, tenant_id, session_id, user_id)
        self.relay.close(session_id)
        return self._end(tenant_id, session_id, "closed", "closed by the user")

    def _end(
        self,
        tenant_id: int,
        session_id: str,
        status: str,
        detail: str,
        *,
        agent_after: str = "gone",  # disposable: an agent serves one session
        db: DbSession | None = None,
    ) -> PlatformSession:
        """End the session (in `db`'s transaction if given). An agent that never received
        it (the key or the queue failed first) goes back to idle; one that did is done, and
        retired with its credential."""
        with contextlib.nullcontext(db) if db is not None else self.factory() as db:
            session = self._session(db, tenant_id, session_id)
            if session.status not in ("closed", "failed"):
                session.status = status
                session.closed = _now()
                session.detail = detail[:2000]
            agent = db.get(Agent, session.agent_id) if session.agent_id else None
            if agent is not None and agent.status != "gone":
                if agent_after == "gone":
                    retire(db, agent)
                else:
                    agent.status = agent_after
            db.commit()
        if status == "failed":
            self.relay.close(session_id, failed=detail)
        return session

    @staticmethod
    def _session(
        db: DbSession, tenant_id: int, session_id: str, user_id: int | None = None
    ) -> PlatformSession:
        """The tenant's session; with `user_id`, only if that user opened it. Someone else's
        is not found, exactly like one that does not exist."""
        session = owned(db, PlatformSession, session_id, tenant_id)
        if session is None or (user_id is not None and session.user_id != user_id):
            raise SessionNotFound(f"no session {session_id}")
        return session

    @staticmethod
    def _agent(db: DbSession, tenant_id: int, agent_id: str) -> Agent:
        agent = owned(db, Agent, agent_id, tenant_id)
        if agent is None:
            raise SessionNotFound(f"no agent {agent_id}")
        return agent
