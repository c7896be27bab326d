"""`sealtrace agent`, `sealtrace launch-agent` and `sealtrace sandbox build-image`,
registered through the `sealtrace.cli` entry point."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from sealtrace.proxy.cli import JsonOpt, guarded

__all__ = ["register"]

PythonOpt = Annotated[
    str, typer.Option("--python", help="The interpreter (and its venv) the image carries.")
]


RequirementsOpt = Annotated[
    Optional[Path],  # noqa: UP045 - typer reads the annotation at run time
    typer.Option(
        "--requirements",
        help="Carry only these distributions (and what they and replay need), taken from the "
        "interpreter's environment: the production environment's `pip freeze`.",
    ),
]


@guarded
def build_image(
    python: PythonOpt = sys.executable,
    requirements: RequirementsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the replay image offline (FROM scratch) through the rootless Podman service, or
    find it already built; print its reference. Exit 2 for a requirement the environment
    cannot provide, 5 if there is no Podman service."""
    import json

    from sealtrace.proxy import UsageError
    from sealtrace.sandbox import MANIFEST_LABEL, RequirementsError, parse_requirements, plan_image
    from sealtrace.sandbox import build_image as build

    from ._local import podman_client

    wanted = None
    if requirements is not None:
        try:
            wanted = parse_requirements(requirements.read_text(), str(requirements))
        except OSError as exc:
            raise UsageError(f"cannot read {requirements}: {exc.strerror}") from None
        except RequirementsError as exc:
            raise UsageError(str(exc)) from None
    plan = plan_image(python, wanted)  # what the environment cannot provide fails here
    client = podman_client()
    reference = build(client, plan)
    image = client.images.get(reference)
    distributions = len(json.loads(image.labels[MANIFEST_LABEL]))
    if as_json:
        typer.echo(json.dumps({"image": reference, "id": image.id, "distributions": distributions}))
    else:
        typer.echo(f"{reference}  {image.id}  {distributions} distributions")


ServerOpt = Annotated[str, typer.Option("--server", envvar="SEALTRACE_AGENT_SERVER",
                                         help="The server's URL.")]  # fmt: skip


@guarded
def agent(
    server: ServerOpt,
    broker: Annotated[str, typer.Option("--broker", envvar="SEALTRACE_AGENT_BROKER",
                                        help="Redis, where assignments come.")] = "redis://127.0.0.1:6379/0",
    idle_timeout: Annotated[float, typer.Option("--idle-timeout", help="Seconds without a "
                                                "question before the session closes.")] = 900.0,
) -> None:  # fmt: skip
    """Serve one replay session, then exit (a supervisor starts the next agent). The agent
    enrolls with the one-time enrollment in SEALTRACE_AGENT_ENROLLMENT, never the command
    line (sealtrace server enroll-agent, or sealtrace launch-agent, mints one)."""
    import os

    from sealtrace.proxy import UsageError

    from ._hygiene import harden_process
    from ._launcher import ENROLLMENT_ENV
    from ._local import sandbox_opener
    from ._server import ServerClient
    from ._worker import run_agent

    harden_process()  # before the enrollment is read and the key pair made
    # Taken out of the environment before anything else starts, so that no child process
    # (the Podman service, Celery, the sandbox) inherits either.
    enrollment = os.environ.pop(ENROLLMENT_ENV, "")
    retired = os.environ.pop("SEALTRACE_AGENT_TOKEN", "")
    if not enrollment:
        raise UsageError(
            "SEALTRACE_AGENT_TOKEN is no longer accepted: set SEALTRACE_AGENT_ENROLLMENT to a "
            "one-time enrollment (sealtrace server enroll-agent, or sealtrace launch-agent)"
            if retired
            else "set SEALTRACE_AGENT_ENROLLMENT to a one-time enrollment (sealtrace server "
            "enroll-agent, or sealtrace launch-agent)"
        )
    del retired
    client = ServerClient(server)
    opener = sandbox_opener()  # the image found (or built) before the agent offers itself
    ended = run_agent(
        client,
        enrollment,
        broker,
        opener,
        boot=opener.boot,  # its container started and waiting before it offers itself
        idle_timeout=idle_timeout,
        on_ready=lambda agent_id: typer.echo(f"agent {agent_id} waiting", err=True),
    )
    typer.echo(f"agent: session {ended}", err=True)


@guarded
def launch_agent(ctx: typer.Context, server: ServerOpt) -> None:
    """Start one agent: mint a one-time enrollment for it with the launcher token, then
    become `sealtrace agent` (the same process, given the other options), which holds the
    enrollment and nothing of the launcher token. The token comes from
    SEALTRACE_LAUNCHER_TOKEN, or from the AWS Secrets Manager secret named by
    SEALTRACE_LAUNCHER_TOKEN_SECRET; never the command line."""
    from ._launcher import launch

    launch(server, list(ctx.args))


def register(app: typer.Typer) -> None:
    app.command("agent")(agent)
    passing = {"allow_extra_args": True, "ignore_unknown_options": True}  # the agent's options
    app.command("launch-agent", context_settings=passing)(launch_agent)
    sandbox = typer.Typer(help="The replay sandbox: its image.", no_args_is_help=True)
    sandbox.command("build-image")(build_image)
    app.add_typer(sandbox, name="sandbox")
