"""`sealtrace replay`, registered into the root command through the `sealtrace.cli` entry
point so that the recorder never imports the replay substrate."""

from __future__ import annotations

import json

import typer

from sealtrace.proxy import Identity
from sealtrace.proxy.cli import IdentityOpt, JsonOpt, LocationArg, RunIdOpt, _guarded

from ._session import raise_for, replay_location

__all__ = ["register"]


@_guarded
def replay(
    location: LocationArg,
    identity: IdentityOpt,
    run_id: RunIdOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-execute a recorded run, serving and checking every external call; print a receipt.

    Exit 0 when bit-exact, 3 at the first divergence, 4 if the recording cannot be trusted,
    2 if this interpreter cannot replay it.
    """
    receipt = replay_location(location, Identity.load(identity), run_id=run_id)
    d = receipt.data
    if as_json:
        typer.echo(json.dumps(d, indent=2, sort_keys=True))
    else:
        exit_status = d["exit_status"]
        typer.echo(f"replay      {receipt.status}")
        typer.echo(f"run         {d.get('run_id')}")
        typer.echo(f"events      {d['events_replayed']} replayed of {d['events_recorded']}")
        typer.echo(f"outputs     {d['outputs_matched']} matched ({d['output_bytes']} bytes)")
        typer.echo(f"exit        {exit_status['replayed']} (recorded {exit_status['recorded']})")
        typer.echo(f"digest      blake2b-256 {d['stream_digest']}")
        for note in d.get("notes") or []:
            typer.echo(f"note        {note.get('what')}: {note.get('detail')}")
    raise_for(receipt)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
