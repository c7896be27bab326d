"""The FastAPI application: create_app() wires settings, the database and the key service
into one `Services` object the routes receive through `_deps`; the v1 API under /v1, the web
console under /console."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI

from ._audit_key import AuditKey, audit_key
from ._console._install import install as install_console
from ._console._trail import Trails
from ._db import connect
from ._deps import Services
from ._key_service import KeyService, KeyWrapper, KmsKeyWrapper
from ._login_limit import LoginLimiter
from ._relay import Relay
from ._routes import router
from ._session_routes import router as session_router
from ._sessions import CeleryDispatcher, Dispatcher, SessionService
from ._settings import ServerSettings

__all__ = ["create_app"]


def create_app(
    settings: ServerSettings,
    *,
    wrapper: KeyWrapper | None = None,
    dispatcher: Dispatcher | None = None,
    audit: AuditKey | None = None,
) -> FastAPI:
    """The API for `settings` (checked first). The KMS client comes from boto3's usual
    configuration (AWS_ENDPOINT_URL points it at moto locally) unless `wrapper` is given;
    assignments go to Celery on settings.redis_url unless `dispatcher` is given; the audit
    chain is MACed by settings.audit_key_id's KMS key (or, in development without one, a
    key derived from the secret key) unless `audit` is given."""
    settings.check()
    engine, factory = connect(settings.database_url)
    if wrapper is None:
        wrapper = KmsKeyWrapper(_kms_client(settings), settings.kms_key_id)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            engine.dispose()

    app = FastAPI(
        lifespan=lifespan,
        title="sealtrace",
        version="1",
        description="Recorded runs, their keys, replay sessions and the audit log. Every "
        "operation names the permission it needs in `x-permission`.",
    )
    keys = KeyService(factory, wrapper)
    relay = Relay(agent_silence=settings.agent_silence)
    sessions = SessionService(
        factory,
        keys,
        relay,
        dispatcher or CeleryDispatcher(settings.redis_url),
        assign_timeout=settings.assign_timeout,
    )
    logins = LoginLimiter(per_account=settings.login_attempts,
                          per_address=10 * settings.login_attempts,
                          window=settings.login_window)  # fmt: skip
    app.state.services = Services(
        settings, factory, keys, relay, sessions, audit or audit_key(settings), logins, Trails()
    )
    app.include_router(router)
    app.include_router(session_router)
    install_console(app)

    @app.get("/health", tags=["health"], openapi_extra={"x-permission": "none", "x-granted-to": []})
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _kms_client(settings: ServerSettings) -> Any:
    import boto3

    return boto3.client("kms", region_name=settings.aws_region)
