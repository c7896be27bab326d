"""The console's lists: a tenant's runs (filtered by service, status and start time, a page at
a time), one user's sessions on a run, and the tenant's audit log (filtered by actor, action
and result). Plain queries; the pages only show what these return.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .._models import AuditEvent, PlatformSession, Run, RunStatus

__all__ = ["PER_PAGE", "RUN_FILTERS", "RunRow", "audit_rows", "find_runs", "runs_sessions"]

PER_PAGE = 25
_RECORDED = (RunStatus.RECORDING, RunStatus.COMPLETE, RunStatus.INCOMPLETE, RunStatus.FAILED)
# The status filter: the run's own states, and "crashed": it ended with a non-zero exit.
RUN_FILTERS = ("complete", "incomplete", "failed", "recording", "crashed")
SINCE = {"1h": 1, "24h": 24, "7d": 24 * 7, "30d": 24 * 30}


@dataclass(frozen=True)
class RunRow:
    run_id: str
    service: str
    host: str
    status: str
    exit_status: int | None
    started: dt.datetime | None
    ended: dt.datetime | None
    store: str
    requests: int | None = None

    @property
    def crashed(self) -> bool:
        return self.exit_status not in (None, 0)

    @property
    def duration(self) -> str:
        if self.started is None or self.ended is None:
            return "—"
        seconds = (self.ended - self.started).total_seconds()
        return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def row_of(run: Run) -> RunRow:
    return RunRow(run.id, run.service or "", run.host or "", run.status.value, run.exit_status,
                  run.started, run.ended, run.store or "", run.requests)  # fmt: skip


def find_runs(
    db: Session, tenant_id: int, *, service: str = "", status: str = "", since: str = "",
    page: int = 1,
) -> tuple[list[RunRow], int, list[str]]:  # fmt: skip
    """(one page of the tenant's runs, newest first; how many match; every service name)."""
    query = select(Run).where(Run.tenant_id == tenant_id, Run.status.in_(_RECORDED))
    if service:
        query = query.where(Run.service == service)
    if status == "crashed":
        query = query.where(Run.exit_status.is_not(None), Run.exit_status != 0)
    elif status in RUN_FILTERS:
        query = query.where(Run.status == RunStatus(status))
    if since in SINCE:
        after = dt.datetime.now(dt.UTC) - dt.timedelta(hours=SINCE[since])
        query = query.where(func.coalesce(Run.started, Run.ended, Run.leased) >= after)
    total = int(db.scalar(select(func.count()).select_from(query.subquery())) or 0)
    page = max(1, page)
    rows = db.scalars(
        query.order_by(func.coalesce(Run.started, Run.ended, Run.leased).desc(), Run.id)
        .offset((page - 1) * PER_PAGE).limit(PER_PAGE)
    )  # fmt: skip
    services = db.scalars(
        select(Run.service).where(Run.tenant_id == tenant_id, Run.service.is_not(None))
        .distinct().order_by(Run.service)
    )  # fmt: skip
    return [row_of(run) for run in rows], total, [s for s in services if s]


def find_run(db: Session, tenant_id: int, run_id: str) -> RunRow | None:
    run = db.get(Run, run_id)
    if run is None or run.tenant_id != tenant_id or run.status not in _RECORDED:
        return None
    return row_of(run)


def runs_sessions(db: Session, tenant_id: int, user_id: int, run_id: str) -> list[Any]:
    """The user's own sessions on the run, newest first (nobody else's: a session is its
    opener's)."""
    return list(db.scalars(
        select(PlatformSession).where(PlatformSession.tenant_id == tenant_id,
                                      PlatformSession.user_id == user_id,
                                      PlatformSession.run_id == run_id)
        .order_by(PlatformSession.opened.desc()).limit(20)
    ))  # fmt: skip


def audit_rows(
    db: Session, tenant_id: int, *, actor: str = "", action: str = "", result: str = "",
    before: int = 0,
) -> list[AuditEvent]:  # fmt: skip
    """The tenant's audit events, newest first, a page at a time (those before seq `before`
    when given), filtered by actor and action (a prefix) and result."""
    query = select(AuditEvent).where(AuditEvent.tenant_id == tenant_id)
    if actor:
        query = query.where(AuditEvent.actor == actor)
    if action:
        query = query.where(AuditEvent.action.startswith(action, autoescape=True))
    if result in ("ok", "denied", "failed"):
        query = query.where(AuditEvent.result == result)
    if before > 0:
        query = query.where(AuditEvent.seq < before)
    return list(db.scalars(query.order_by(AuditEvent.seq.desc()).limit(PER_PAGE * 2)))
