"""`sealtrace sandbox build-image`, registered through the `sealtrace.cli` entry point."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sealtrace.proxy.cli import JsonOpt, _guarded

__all__ = ["register"]

PythonOpt = Annotated[
    str, typer.Option("--python", help="The interpreter (and its venv) the image carries.")
]


@_guarded
def build_image(python: PythonOpt = sys.executable, as_json: JsonOpt = False) -> None:
    """Build the replay image offline (FROM scratch) through the rootless Podman service, or
    find it already built; print its reference. Exit 5 if there is no Podman service."""
    import json

    from sealtrace.sandbox._image import build_image as build

    from ._local import podman_client

    reference = build(podman_client(), python)
    typer.echo(json.dumps({"image": reference}) if as_json else reference)


def register(app: typer.Typer) -> None:
    sandbox = typer.Typer(help="The replay sandbox: its image.", no_args_is_help=True)
    sandbox.command("build-image")(build_image)
    app.add_typer(sandbox, name="sandbox")
