"""`sealtrace sandbox build-image`, registered through the `sealtrace.cli` entry point."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from sealtrace.proxy.cli import JsonOpt, _guarded

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


@_guarded
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
    from sealtrace.sandbox._distributions import RequirementsError, parse_requirements
    from sealtrace.sandbox._image import MANIFEST_LABEL, plan_image
    from sealtrace.sandbox._image import build_image as build

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


def register(app: typer.Typer) -> None:
    sandbox = typer.Typer(help="The replay sandbox: its image.", no_args_is_help=True)
    sandbox.command("build-image")(build_image)
    app.add_typer(sandbox, name="sandbox")
