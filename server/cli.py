"""`sealtrace server`: run the API, migrate its database, create tenants, users and tokens,
and verify the audit log. Registered through the `sealtrace.cli` entry point; settings come
from SEALTRACE_SERVER_* (sealtrace.server._settings)."""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Annotated

import typer

from sealtrace.proxy import UsageError
from sealtrace.proxy.cli import JsonOpt, guarded

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from ._settings import ServerSettings

__all__ = ["register"]

app = typer.Typer(help="The central server: API, keys, sessions, audit.", no_args_is_help=True)

TenantOpt = Annotated[str, typer.Option("--tenant", help="The tenant's name.")]


def _settings() -> ServerSettings:
    from ._settings import ServerSettings

    return ServerSettings().check()


@app.command("migrate")
@guarded
def migrate() -> None:
    """Bring the database to the newest schema."""
    from ._db import migrate as upgrade

    settings = _settings()
    upgrade(settings.database_url)
    typer.echo("migrated")


@app.command("serve")
@guarded
def serve(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8400,
) -> None:
    """Run the API (migrating the database first)."""
    import uvicorn

    from sealtrace.agent import harden_process

    from ._app import create_app
    from ._db import migrate as upgrade

    harden_process()  # it unwraps run keys: no core dump, no reading its memory
    settings = _settings()
    upgrade(settings.database_url)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")


@app.command("create-tenant")
@guarded
def create_tenant(tenant: TenantOpt) -> None:
    from sqlalchemy.exc import IntegrityError

    from ._models import Tenant

    with _factory()() as db:
        row = Tenant(name=tenant)
        db.add(row)
        try:
            db.commit()
        except IntegrityError:
            raise UsageError(f"tenant {tenant!r} exists") from None
        _audit_cli("tenant.create", tenant, row.id)
    typer.echo(f"tenant {tenant}")


@app.command("create-user")
@guarded
def create_user(
    tenant: TenantOpt,
    name: Annotated[str, typer.Option("--name")],
    role: Annotated[str, typer.Option("--role", help="admin, oncall, security or auditor")],
    as_json: JsonOpt = False,
) -> None:
    """Create a user with a generated password (shown once)."""
    from sqlalchemy.exc import IntegrityError

    from ._auth import hash_password
    from ._models import Role, User

    try:
        kind = Role(role)
    except ValueError:
        raise UsageError(f"no role {role!r}: admin, oncall, security or auditor") from None
    password = secrets.token_urlsafe(18)
    with _factory()() as db:
        tenant_id = _tenant_id(db, tenant)
        db.add(User(tenant_id=tenant_id, name=name, role=kind,
                    password_hash=hash_password(password)))  # fmt: skip
        try:
            db.commit()
        except IntegrityError:
            raise UsageError(f"user {name!r} exists in tenant {tenant!r}") from None
    _audit_cli("user.create", f"user:{name} ({kind.value})", tenant_id)
    out = {"tenant": tenant, "user": name, "role": kind.value, "password": password}
    typer.echo(json.dumps(out) if as_json else f"user {name} ({kind.value}) password {password}")


@app.command("create-token")
@guarded
def create_token(
    tenant: TenantOpt,
    scope: Annotated[str, typer.Option("--scope", help="record or agent")],
    name: Annotated[str, typer.Option("--name")] = "token",
) -> None:
    """Create a `record` or `agent` token (shown once; only its digest is kept)."""
    from ._auth import issue_token
    from ._models import Scope

    if scope not in ("record", "agent"):
        raise UsageError("--scope is record or agent (people sign in for a user token)")
    settings = _settings()
    with _factory()() as db:
        key = settings.secret_key.get_secret_value().encode()
        tenant_id = _tenant_id(db, tenant)
        token = issue_token(db, key, tenant_id=tenant_id, scope=Scope(scope), name=name)
        db.commit()
    _audit_cli("token.create", f"{scope}-token:{token.split('_')[1]} ({name})", tenant_id)
    typer.echo(token)


@app.command("audit-verify")
@guarded
def audit_verify(as_json: JsonOpt = False) -> None:
    """Check every tenant's audit chain (digests, and each head's MAC under the audit key) and
    that no row is missing. Exit 3 if any is broken."""
    from ._audit import verify
    from ._audit_key import audit_key

    with _factory()() as db:
        verdict = verify(db, audit_key(_settings()))
    heads = {h.chain: {"row": h.chain_seq, "digest": h.digest.hex()} for h in verdict.heads}
    found = [f"row {p.seq}: {p.why}" for p in verdict.problems]
    if as_json:
        typer.echo(json.dumps({"rows": verdict.rows, "whole": verdict.whole, "heads": heads,
                               "problems": found}))  # fmt: skip
    else:
        typer.echo(f"{verdict.rows} rows in {len(heads)} chains: "
                   + ("whole" if verdict.whole else "BROKEN"))  # fmt: skip
        for chain, head in heads.items():
            typer.echo(f"head of {chain}: row {head['row']} {head['digest']}")
        for line in found:
            typer.echo(line)
    if not verdict.whole:
        raise typer.Exit(3)


def _audit_cli(action: str, target: str, tenant_id: int) -> None:
    """Privileged actions from this command line are audit events too (actor: the OS user)."""
    import getpass

    from ._audit import append
    from ._audit_key import audit_key

    append(_factory(), audit_key(_settings()), actor=f"cli:{getpass.getuser()}", action=action,
           target=target, result="ok", tenant_id=tenant_id)  # fmt: skip


def _factory() -> sessionmaker[Session]:
    from ._db import connect

    return connect(_settings().database_url)[1]


def _tenant_id(db: Session, name: str) -> int:
    from sqlalchemy import select

    from ._models import Tenant

    found = db.scalars(select(Tenant.id).where(Tenant.name == name)).first()
    if found is None:
        raise UsageError(f"no tenant {name!r}")
    return int(found)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="server")
