"""The `sealtrace` command line.

Errors are one line on stderr and an exit code from docs/architecture.md (0 ok, 2 usage,
3 divergence, 4 integrity, 5 sandbox; 1 for an unreachable or failing store). A user mistake
never prints a traceback; set SEALTRACE_DEBUG=1 to see one for an unexpected failure.
Plaintext goes to stdout, never to a file unless --output names one.
"""

from __future__ import annotations

import functools
import io
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar, cast

import click
import typer

from ._errors import IncompleteRecordingError, SealtraceError, UsageError
from ._extras import missing_extra
from ._format import DEFAULT_CHUNK_SIZE, DEFAULT_SEGMENT_SIZE
from ._inspect import describe_recording
from ._keys import Identity, Recipient, write_keypair
from ._reader import SealedReader
from ._store import open_store
from ._writer import SealedWriter

# What the other components' commands (sealtrace.sandbox.cli, .agent.cli, .server.cli, which
# register under this app) build on.
__all__ = [
    "IdentityOpt",
    "JsonOpt",
    "LocationArg",
    "ProcessOpt",
    "RunIdOpt",
    "app",
    "guarded",
    "main",
]

app = typer.Typer(
    name="sealtrace",
    help="Record, seal, and open Python execution recordings.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])
STDIN_READ = 1024 * 1024


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"sealtrace: error: {message}", err=True)
    raise typer.Exit(code)


def guarded(func: F) -> F:
    """Turn sealtrace errors into one line and their exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except SealtraceError as exc:
            _fail(str(exc), exc.exit_code)
        except ValueError as exc:
            _fail(str(exc), 2)
        except (typer.Exit, click.exceptions.ClickException, click.exceptions.Abort):
            raise
        except BrokenPipeError:
            # The reader of our stdout went away (e.g. `| head`): not our error to report.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
        except Exception as exc:
            # An optional dependency of another role that this install lacks: say which.
            missing = missing_extra(exc) if isinstance(exc, ModuleNotFoundError) else None
            if missing is not None:
                _fail(str(missing), missing.exit_code)
            if os.environ.get("SEALTRACE_DEBUG"):
                raise
            _fail(f"unexpected {exc.__class__.__name__}: {exc} (SEALTRACE_DEBUG=1 shows more)", 1)

    return wrapper  # type: ignore[return-value]


def _emit_json(payload: dict[str, Any]) -> None:
    typer.echo(json.dumps(payload, indent=2, sort_keys=True))


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
LocationArg = Annotated[str, typer.Argument(help="Directory or s3://bucket/prefix.")]
IdentityOpt = Annotated[Path, typer.Option("--identity", help="Private identity file.")]
RunIdOpt = Annotated[
    str | None, typer.Option("--run-id", help="Refuse unless the recording is this run.")
]
ProcessOpt = Annotated[
    str,
    typer.Option(
        "--process",
        help="A process the recorded one forked, by its path: 1 its first child, 1.2 that "
        "child's second (`sealtrace inspect` lists them). The run then replays as that process "
        "did: its parent's run up to the fork, then its own. Default: the recorded process.",
    ),
]


@app.command()
@guarded
def keygen(
    out: Annotated[Path, typer.Option("--out", help="Directory for NAME.pub and NAME.key.")],
    name: Annotated[str, typer.Option(help="Base name of the two files.")] = "sealtrace",
    as_json: JsonOpt = False,
) -> None:
    """Create a recipient (NAME.pub) and its private identity (NAME.key, mode 0600)."""
    pub, key = write_keypair(out, name)
    recipient = Recipient.load(pub)
    if as_json:
        _emit_json({"recipient": str(pub), "identity": str(key), "public_key": recipient.to_text()})
    else:
        typer.echo(f"recipient: {pub}\nidentity:  {key}  (keep private)")


@app.command()
@guarded
def seal(
    recipient: Annotated[Path, typer.Option("--recipient", help="Recipient .pub file.")],
    run_id: Annotated[str, typer.Option("--run-id", help="The run this recording belongs to.")],
    output: Annotated[str, typer.Option("--output", help="Directory or s3://bucket/prefix.")],
    chunk_size: Annotated[
        int, typer.Option(help="Plaintext bytes per chunk.")
    ] = DEFAULT_CHUNK_SIZE,
    segment_size: Annotated[
        int, typer.Option(help="Bytes per segment object.")
    ] = DEFAULT_SEGMENT_SIZE,
    as_json: JsonOpt = False,
) -> None:
    """Seal standard input into a recording at OUTPUT."""
    store = open_store(output)
    if store.list().objects:
        raise UsageError(f"{store.location} already holds a recording; recordings are written once")
    writer = SealedWriter(
        store, Recipient.load(recipient), run_id, chunk_size=chunk_size, segment_size=segment_size
    )
    stdin = cast(io.BufferedIOBase, sys.stdin.buffer)
    buffer = bytearray(STDIN_READ)
    with writer:
        while n := stdin.readinto(buffer):
            writer.write(memoryview(buffer)[:n])
    summary = {
        "location": store.location,
        "run_id": run_id,
        "plaintext_bytes": writer.plaintext_bytes,
        "chunks": writer.chunks_sealed,
        "segments": writer.segments_written,
        "header_digest": writer.header_digest.hex(),
    }
    if as_json:
        _emit_json(summary)
    else:
        typer.echo(
            f"sealed {writer.plaintext_bytes} bytes as run {run_id!r} into {store.location} "
            f"({writer.chunks_sealed} chunks, {writer.segments_written} segments)",
            err=True,
        )


@app.command("open")
@guarded
def open_(
    location: LocationArg,
    identity: IdentityOpt,
    output: Annotated[
        Path | None, typer.Option("--output", help="Write plaintext here instead of stdout.")
    ] = None,
    run_id: RunIdOpt = None,
    allow_incomplete: Annotated[
        bool,
        typer.Option(help="Exit 0 for a recording whose writer never finished (still reported)."),
    ] = False,
) -> None:
    """Verify and decrypt a recording to stdout (or --output)."""
    reader = SealedReader(open_store(location), Identity.load(identity), expected_run_id=run_id)
    for alarm in reader.status.alarms:
        typer.echo(f"sealtrace: alarm: {alarm}", err=True)
    if output is None:
        _copy(reader, sys.stdout.buffer)
    else:
        _copy_to_file(reader, output, keep_partial=allow_incomplete)
    status = reader.status
    if not status.complete:
        message = f"recording {reader.run_id!r} is {status.describe()}"
        if not allow_incomplete:
            raise IncompleteRecordingError(message, chunks=status.chunks)
        typer.echo(f"sealtrace: warning: {message}", err=True)


def _copy(reader: SealedReader, out: Any) -> None:
    reader.copy_to(out.write)
    out.flush()


def _copy_to_file(reader: SealedReader, path: Path, *, keep_partial: bool) -> None:
    """Write via a temporary name so a failed open leaves no partial plaintext behind."""
    if path.exists():
        raise UsageError(f"refusing to overwrite {path}")
    tmp = path.with_name(f".{path.name}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            _copy(reader, out)
        if reader.status.complete or keep_partial:
            os.link(tmp, path)
    finally:
        tmp.unlink()


@app.command()
@guarded
def inspect(
    location: Annotated[str, typer.Argument(help="Directory or s3://bucket/prefix.")],
    identity: Annotated[
        Path | None, typer.Option("--identity", help="Also authenticate every chunk.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Describe a recording: header, segments, completeness, versions. Needs no key."""
    report = describe_recording(open_store(location), Identity.load(identity) if identity else None)
    if as_json:
        _emit_json(report.as_dict())
        return
    typer.echo(f"recording   {report.location}")
    typer.echo(f"run id      {report.run_id}")
    typer.echo(f"format      v{report.format_version}, {report.suite}")
    typer.echo(f"chunks      {report.chunk_size} bytes; segments up to {report.segment_size} bytes")
    typer.echo(f"created     {report.created}")
    typer.echo(f"header      sha256 {report.header_digest}  versions {report.header_versions}")
    for seg in report.segments:
        plural = "" if seg.chunks == 1 else "s"
        detail = seg.problem or f"{seg.chunks} chunk{plural}" + (", final" if seg.has_final else "")
        typer.echo(f"  {seg.name}  {seg.size:>10} bytes  versions {seg.versions}  {detail}")
    typer.echo(f"status      {report.completeness}")
    if report.continues is not None:
        typer.echo(f"continues   {report.continues}")
    for path, status in report.processes.items():
        typer.echo(f"process {path:<4}{status}  (a forked process: --process {path})")
    for alarm in report.alarms:
        typer.echo(f"ALARM       {alarm}")


@app.command(context_settings={"allow_interspersed_args": False})
@guarded
def record(
    recipient: Annotated[
        Path | None, typer.Option("--recipient", help="Recipient .pub file.")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", help="Directory or s3://bucket/prefix.")
    ] = None,
    command: Annotated[
        list[str] | None,
        typer.Argument(help="-- PYTHON [options] (script.py | -m module | -c code) [args]"),
    ] = None,
    app_root: Annotated[
        list[Path] | None,
        typer.Option("--app-root", help="Directory whose imported modules' sources are recorded."),
    ] = None,
    env_allow: Annotated[
        list[str] | None,
        typer.Option("--env-allow", help="Environment variable (or glob) recorded at start."),
    ] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Name for this run.")] = None,
    server: Annotated[
        str | None, typer.Option("--server", help="Record under a key leased from the server.")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", hidden=True, help="Refused: a command line is world-readable."),
    ] = None,
    token_fd: Annotated[
        int | None,
        typer.Option(
            "--token-fd",
            help="With --server: read the record token from this open descriptor (then "
            "closed) instead of SEALTRACE_TOKEN.",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="With --server: s3://bucket/prefix for runs (default: the server's choice).",
        ),
    ] = None,
    service: Annotated[
        str | None, typer.Option("--service", help="With --server: the service's name.")
    ] = None,
    rotate_requests: Annotated[
        int | None,
        typer.Option(
            "--rotate-requests",
            min=1,
            help="Rotate to a new run (beside the first: OUTPUT.2, OUTPUT.3, ...; with "
            "--server, under a key leased for it) once the run's request index holds this "
            "many requests.",
        ),
    ] = None,
    rotate_size: Annotated[
        str | None,
        typer.Option(
            "--rotate-size",
            help="Rotate to a new run once the run's event stream is this large "
            "(bytes, or with K, M or G).",
        ),
    ] = None,
) -> None:
    """Run a Python program and record it at the call boundary into a sealed recording.

    Either --recipient and --output, or --server and --store with the server's record token
    in SEALTRACE_TOKEN or on a descriptor (--token-fd), never on the command line (the key is
    leased from the server and the run registered with it; without a lease the program runs
    unrecorded). The program never sees the token. Its stdout, stderr and exit status are its
    own. If recording fails, the program still runs to completion and the failure is
    reported once on stderr.
    """
    from ._record_token import TOKEN_ENV, take_custody, take_token
    from ._recording_cli import run_recorded, run_through_platform

    take_custody()  # main() did, unless called some other way
    if token is not None:
        raise UsageError(f"--token is refused: every user of this host can read a command "
                         f"line (/proc/PID/cmdline); set {TOKEN_ENV} or pass the token on a "
                         "descriptor with --token-fd")  # fmt: skip
    roots, allow = [str(p) for p in app_root or []], list(env_allow or [])
    rotate_bytes = None if rotate_size is None else _size(rotate_size, "--rotate-size")
    if server is not None:
        if recipient is not None or output is not None or run_id is not None:
            raise UsageError("--server leases the key and names the run: no --recipient, "
                             "--output or --run-id")  # fmt: skip
        secret = take_token(token_fd)
        if not secret:
            raise UsageError(f"--server needs the record token in {TOKEN_ENV} or --token-fd")
        from ._platform import PlatformClient

        code = run_through_platform(PlatformClient(server, secret), store, command or [],
                                    service=service, app_roots=roots, env_allow=allow,
                                    rotate_requests=rotate_requests,
                                    rotate_bytes=rotate_bytes)  # fmt: skip
    else:
        if token_fd is not None:
            raise UsageError("--token-fd goes with --server")
        if recipient is None or output is None:
            raise UsageError("record needs --recipient and --output (or --server)")
        code = run_recorded(Recipient.load(recipient), output, command or [], app_roots=roots,
                            env_allow=allow, run_id=run_id, rotate_requests=rotate_requests,
                            rotate_bytes=rotate_bytes)  # fmt: skip
    raise typer.Exit(code)


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MIN_ROTATE_BYTES = 64 * 1024  # one drain of the recorder's buffer: less would rotate at each


def _size(text: str, option: str) -> int:
    """A size as `--rotate-size` takes it: 1048576, 512K, 256M, 2G (binary units)."""
    number, unit = text.strip().upper().rstrip("B"), ""
    if number[-1:] in _UNITS:
        number, unit = number[:-1], number[-1]
    if not number.isdigit() or int(number) * _UNITS[unit] < MIN_ROTATE_BYTES:
        raise UsageError(f"{option} takes a size of at least 64K (bytes, or with K, M or G), "
                         f"not {text!r}")  # fmt: skip
    return int(number) * _UNITS[unit]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"sealtrace {version('sealtrace')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("sealtrace (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Record, seal, and open Python execution recordings."""


def _load_commands() -> None:
    """Commands of other sealtrace components, registered without the recorder importing them."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="sealtrace.cli"):
        ep.load()(app)


def main() -> None:
    if sys.version_info[:2] != (3, 11) or sys.implementation.name != "cpython":
        # The engine and the recording format are CPython 3.11's (docs/architecture.md).
        version = ".".join(map(str, sys.version_info[:3]))
        typer.echo(f"sealtrace: error: sealtrace needs CPython 3.11, not "
                   f"{sys.implementation.name} {version}", err=True)  # fmt: skip
        raise SystemExit(2)
    # `record` starts the program under test: it needs no other component's commands. It
    # also holds the record token: before anything else, it keeps the token from the program.
    if sys.argv[1:2] == ["record"]:
        from ._record_token import take_custody

        try:
            take_custody()
        except OSError as exc:
            typer.echo(f"sealtrace: error: cannot keep the record token from the program "
                       f"({exc}); nothing was started", err=True)  # fmt: skip
            raise SystemExit(1) from None
    else:
        _load_commands()
    app()


if __name__ == "__main__":
    main()
