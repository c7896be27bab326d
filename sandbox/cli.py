"""`sealtrace replay`, `trace`, `flows` and `inspect-stack`, registered into the root command
through the `sealtrace.cli` entry point so that the recorder never imports the replay
substrate or the provenance engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sealtrace.proxy import Identity, UsageError
from sealtrace.proxy.cli import IdentityOpt, JsonOpt, LocationArg, ProcessOpt, RunIdOpt, guarded
from sealtrace.proxy.format import ParsedStream

from ._replay_process import (
    Receipt,
    give_back_freed_memory,
    load_recording,
    raise_for,
    replay_location,
)
from ._validate import validate
from .questions import DEFAULT_DEPTH, Answerer, Flows, InspectStack, Replay, Trace

if TYPE_CHECKING:
    from ._explain import SourceLines

__all__ = ["register"]

AtOpt = Annotated[
    str,
    typer.Option(
        "--at",
        help="Where to stop: FILE:LINE[#HIT], return:FUNC[#N] or return:FILE:FUNC[#N] (the "
        "Nth return of a function, its locals still there), an instruction counter, crash, "
        "output (where the run wrote its last output) or end.",
    ),
]
VarOpt = Annotated[
    str, typer.Option("--var", help="The value: a name, then .attributes and [literal keys].")
]
DepthOpt = Annotated[
    int,
    typer.Option("--depth", help="How many computations back to follow (moves are free); 1 to 64."),
]
EveryOpt = Annotated[
    int | None,
    typer.Option(
        "--checkpoint-every",
        help="Take a fork checkpoint every N instructions and start each pass from the "
        "nearest one (0: every pass replays from the start; by default 250,000 for a stop at "
        "crash, end or output, whose first pass runs the whole run anyway, else 0).",
        show_default=False,
    ),
]
MaxCheckpointsOpt = Annotated[
    int, typer.Option("--max-checkpoints", help="Past this many, keep every other one.")
]
SandboxOpt = Annotated[
    bool,
    typer.Option(
        "--sandbox/--in-process",
        help="Replay in a hardened rootless Podman container, where only fixed frames come "
        "out (the default; the Podman service is started for the command if none runs). "
        "--in-process runs the recorded program's code on this host, with your privileges: "
        "only for recordings you trust, since anyone holding a run's public key can forge "
        "its source.",
    ),
]
WholeRunOpt = Annotated[
    bool,
    typer.Option(
        "--whole-run/--window",
        help="With --at request:N: trace the whole run (--whole-run), or only from the "
        "request's connection on (--window, the default: an input made before shows as made "
        "before the traced window). In-process the replay runs without the engine up to the "
        "connection; in the sandbox the trace starts from the session's nearest checkpoint.",
    ),
]
AllowIncompleteOpt = Annotated[
    bool,
    typer.Option(
        "--allow-incomplete",
        help="A recording that never got its end (a killed process) is replayed as far as it "
        "goes, and stops there (exit 3 for replay; questions answered up to it).",
    ),
]
FromOpt = Annotated[
    str, typer.Option("--from", help="EXPR@LOCATION, or event:N for a recorded input.")
]


@guarded
def replay(
    location: LocationArg,
    identity: IdentityOpt,
    run_id: RunIdOpt = None,
    sandbox: SandboxOpt = True,
    process: ProcessOpt = "",
    allow_incomplete: AllowIncompleteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Re-execute a recorded run, serving and checking every external call; print a receipt.

    Exit 0 when bit-exact, 3 at the first divergence, 4 if the recording cannot be trusted,
    2 if this interpreter (or the sandbox's image) cannot replay it, 5 if the sandbox fails.
    """
    if sandbox:
        data, parsed = load_recording(location, Identity.load(identity), run_id, process,
                                      allow_incomplete=allow_incomplete)  # fmt: skip
        with _sandboxed(data, parsed, receipt_only=True) as client:
            receipt = Receipt(dict(client.replay(Replay())))
    else:
        receipt = replay_location(location, Identity.load(identity), run_id=run_id,
                                  process=process, allow_incomplete=allow_incomplete)  # fmt: skip
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


@guarded
def requests(
    location: LocationArg,
    identity: IdentityOpt,
    run_id: RunIdOpt = None,
    process: ProcessOpt = "",
    allow_incomplete: AllowIncompleteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """List the HTTP requests the recorded run served (its request index), in the order they
    began: method, path, status, duration and the events each spans. Reads the recording and
    replays nothing; `--at request:N` then asks about request N.

    Exit 4 if the recording cannot be trusted (or is incomplete).
    """
    _data, parsed = load_recording(location, Identity.load(identity), run_id, process,
                                   allow_incomplete=allow_incomplete)  # fmt: skip
    _say_where_it_ends(parsed)
    index = parsed.request_index()
    if as_json:
        doc = {
            "indexed": parsed.indexes_requests,
            "count": len(index),
            "requests": [{"number": n, **r.as_dict()} for n, r in enumerate(index, 1)],
        }
        typer.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    if not parsed.indexes_requests:
        typer.echo("this recording keeps no request index (it was made by an older recorder)")
        return
    if not index:
        typer.echo("the run served no HTTP requests")
        return
    typer.echo(f"{'#':>5}  {'method':<7} {'status':>6} {'duration':>10}  {'events':<15} path")
    for n, r in enumerate(index, 1):
        status = "-" if r.status is None else str(r.status)
        duration = f"{r.duration * 1000:.1f} ms"
        flag = "" if r.complete else "  (still open when the recording ended)"
        events = f"{r.first}-{r.last}"
        line = f"{n:>5}  {r.method:<7} {status:>6} {duration:>10}  {events:<15} {r.path!r}"
        typer.echo(line + flag)


def _sandboxed(data: bytes, parsed: ParsedStream, **options: Any) -> Answerer:
    """The answerer in the sandbox, from the installed sandbox client (sealtrace.agent, found
    through the `sealtrace.sandbox_client` entry point: this package never imports it). The
    opener's answerer is held to the contract by tests/sandbox/test_questions.py."""
    from importlib.metadata import entry_points

    clients = list(entry_points(group="sealtrace.sandbox_client"))
    if not clients:
        raise UsageError("--sandbox needs sealtrace's agent package, which is not installed")
    opener: Callable[..., Answerer] = clients[0].load()
    return opener(data, parsed, **options)


# In-process, a stop the run must be surveyed for first (crash, end, output) takes a
# checkpoint this often by default, as a sandboxed session does.
AUTO_CHECKPOINT_EVERY = 250_000


def _answerer(
    location: str, identity: Any, run_id: str | None, every: int | None, cap: int,
    sandbox: bool, at: str | None = None, whole_run: bool = True, process: str = "",
    allow_incomplete: bool = False,
) -> tuple[Answerer, SourceLines]:  # fmt: skip
    """The recording's answerer: in-process (Inquiry) or, with --sandbox, the sandbox
    client. Both answer every question of sealtrace.sandbox.questions with the same
    documents. In-process, a question about one request (`at` request:N) traces only a
    window from that request's connection on, unless `whole_run`; and with `every` not
    given, a stop at crash, end or output takes checkpoints (AUTO_CHECKPOINT_EVERY): the
    first pass runs the whole run to find that stop anyway, and keeping checkpoints (and the
    edges in them) on the way lets every later pass start near the stop."""
    from ._checkpoints import CheckpointPolicy
    from ._explain import SourceLines
    from ._inquiry import Inquiry, request_window
    from .questions import parse_at

    if every is not None and every < 0:
        raise ValueError("--checkpoint-every must be 0 or more")
    data, parsed = load_recording(location, Identity.load(identity), run_id, process,
                                  allow_incomplete=allow_incomplete)  # fmt: skip
    _say_where_it_ends(parsed)
    lines = SourceLines(parsed)
    answerer: Answerer
    if sandbox:
        answerer = _sandboxed(data, parsed)
    else:
        stop = parse_at(at) if at is not None else None
        if every is None:
            surveyed = stop is not None and stop.special is not None
            every = AUTO_CHECKPOINT_EVERY if surveyed else 0
        policy = CheckpointPolicy(every, cap) if every else None
        window = None
        if stop is not None and stop.request is not None and not whole_run:
            window = request_window(parsed, stop.request)
        answerer = Inquiry(data, parsed, checkpoints=policy, window=window)
    del data, parsed
    give_back_freed_memory()  # what decrypting and parsing took, while the passes run
    return answerer, lines


def _say_where_it_ends(parsed: ParsedStream) -> None:
    """Once, on stderr: a run that does not end with the program (it was rotated, or it is
    incomplete) is answered up to where its recording ends, which `--at end` means."""
    stop = parsed.stop or {}
    if stop.get("incomplete"):
        typer.echo(f"sealtrace: note: the recording ends at event {stop.get('events')}, "
                   "incomplete (the process ended without finishing it): answers reach that "
                   "far, and --at end is where it ends", err=True)  # fmt: skip
    elif stop.get("continued_in"):
        typer.echo(f"sealtrace: note: this run ends where the recorder rotated it (it goes "
                   f"on in run {stop['continued_in']}): --at end is where it ends",
                   err=True)  # fmt: skip


def _answer(doc: Any, as_json: bool, text: Callable[[], str]) -> None:
    typer.echo(json.dumps(doc, indent=2, sort_keys=True) if as_json else text())


@guarded
def trace(
    location: LocationArg,
    identity: IdentityOpt,
    at: AtOpt,
    var: VarOpt,
    depth: DepthOpt = DEFAULT_DEPTH,
    run_id: RunIdOpt = None,
    every: EveryOpt = None,
    cap: MaxCheckpointsOpt = 64,
    sandbox: SandboxOpt = True,
    whole_run: WholeRunOpt = False,
    process: ProcessOpt = "",
    allow_incomplete: AllowIncompleteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Trace a value back through every computation to the inputs that produced it.

    Exit 2 for a location the run never reached or an expression that names nothing there,
    3 if replay diverges before the answer, 4 if the recording cannot be trusted.
    """
    from ._explain import render_trace

    answerer, src = _answerer(
        location, identity, run_id, every, cap, sandbox, at, whole_run, process, allow_incomplete
    )
    with answerer:
        doc = answerer.trace(Trace(at=at, var=var, depth=depth, whole_run=whole_run))
    _answer(doc, as_json, lambda: render_trace(doc, answerer.last_nodes, src, answerer.last_cuts))


@guarded
def flows(
    location: LocationArg,
    identity: IdentityOpt,
    source: FromOpt,
    run_id: RunIdOpt = None,
    every: EveryOpt = None,
    cap: MaxCheckpointsOpt = 64,
    sandbox: SandboxOpt = True,
    process: ProcessOpt = "",
    allow_incomplete: AllowIncompleteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Follow a value forward: every location that used it and every output it reached."""
    from ._explain import render_flows

    answerer, src = _answerer(location, identity, run_id, every, cap, sandbox, process=process,
                              allow_incomplete=allow_incomplete)  # fmt: skip
    with answerer:
        doc = answerer.flows(Flows(source=source))
    _answer(doc, as_json, lambda: render_flows(doc, src))


@guarded
def inspect_stack(
    location: LocationArg,
    identity: IdentityOpt,
    at: AtOpt,
    run_id: RunIdOpt = None,
    every: EveryOpt = None,
    cap: MaxCheckpointsOpt = 64,
    sandbox: SandboxOpt = True,
    whole_run: WholeRunOpt = False,
    process: ProcessOpt = "",
    allow_incomplete: AllowIncompleteOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Show the frames at a point of the run: every local's value and the step that made it."""
    from ._explain import render_stack

    answerer, src = _answerer(
        location, identity, run_id, every, cap, sandbox, at, whole_run, process, allow_incomplete
    )
    with answerer:
        doc = answerer.inspect_stack(InspectStack(at=at))
    _answer(doc, as_json, lambda: render_stack(doc, src))


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)
    app.command("requests")(requests)
    app.command("trace")(trace)
    app.command("flows")(flows)
    app.command("inspect-stack")(inspect_stack)
    app.command("validate")(validate)
