"""`sealtrace record`: start the target interpreter with the recorder installed first.

The child's exit status becomes ours (a child killed by signal N exits 128+N, as a shell
reports it). The parent does no recording itself; it checks what it can before starting the
program (the recipient, the output location, the command line) so that mistakes are usage
errors (exit 2) rather than a run recorded nowhere. Through the server it holds the record
token, which the program must never see (`_record_token`): the program inherits stdio only,
an environment without the token, and the core limit it was started with; it is started
while the recorder has one thread, so that preexec_fn is safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._boot import BOOT_CODE
from ._errors import IntegrityError, UsageError
from ._format import HEADER_OBJECT, RecordingHeader
from ._inspect import describe_recording
from ._keys import Recipient
from ._launch import parse_command
from ._platform import PlatformClient, PlatformError
from ._record_token import refuse_if_visible, restore_in_child
from ._store import open_store

__all__ = ["run_recorded", "run_through_platform"]


def run_through_platform(
    platform: PlatformClient,
    store_base: str | None,
    command: Sequence[str],
    *,
    service: str | None = None,
    app_roots: Sequence[str] = (),
    env_allow: Sequence[str] = (),
) -> int:
    """Record under a key leased from the server, register the run once its header is
    written, and finish it when the program ends. Without a lease the program runs
    unrecorded, and says so once."""
    _python, target = parse_command(list(command))
    if target.kind == "script" and not os.path.isfile(target.value):
        raise UsageError(f"can't open file {target.value!r}: no such file")
    refuse_if_visible(platform.token, command, os.environ)
    lease = platform.lease()
    if platform.notice:
        print(f"sealtrace: {platform.notice}", file=sys.stderr, flush=True)
    if lease is None:
        print(f"sealtrace: not recording this run: no key from the server ({platform.why})",
              file=sys.stderr, flush=True)  # fmt: skip
        return _run_child(list(command), dict(os.environ))
    base = store_base or lease.store
    if not base:
        print("sealtrace: not recording this run: no --store given and the server names none",
              file=sys.stderr, flush=True)  # fmt: skip
        platform.finish(lease.run_id, "failed", detail="no store")
        return _run_child(list(command), dict(os.environ))
    output = f"{base.rstrip('/')}/{lease.run_id}"
    store = open_store(output)
    done = threading.Event()
    registered = threading.Event()
    name = service or (os.path.basename(target.value) if target.kind != "code" else "python -c")

    def register() -> None:
        while True:
            with contextlib.suppress(Exception):  # the store may not be reachable at all
                if HEADER_OBJECT in store.list().objects:
                    wrapped = RecordingHeader.decode(store.get(HEADER_OBJECT)).wrapped_key
                    platform.register(lease.run_id, wrapped, store=output, service=name,
                                      host=socket.gethostname())  # fmt: skip
                    registered.set()
                    return
            if done.wait(0.2):
                return

    watcher = threading.Thread(target=register, name="sealtrace-register", daemon=True)
    # A freshly leased run's location is new: no need to look first, and a store that cannot
    # be reached must not keep the program from running (the recorder reports it once). The
    # watcher starts once the program has: no thread of ours runs while it is forked.
    summary: dict[str, Any] = {}
    code = run_recorded(lease.recipient, output, command, app_roots=app_roots,
                        env_allow=env_allow, run_id=lease.run_id, look_first=False,
                        on_start=watcher.start, summary=summary)  # fmt: skip
    requests = summary.get("requests")
    requests = requests if isinstance(requests, int) and not isinstance(requests, bool) else None
    done.set()
    watcher.join()
    if not registered.is_set():
        register()  # the header may have come at the very end
    try:
        if not registered.is_set():
            platform.finish(lease.run_id, "failed", exit_status=code,
                            detail="the recording never reached the store")  # fmt: skip
        else:
            claims = describe_recording(store).completeness.startswith("claims complete")
            platform.finish(lease.run_id, "complete" if claims else "incomplete",
                            exit_status=code, requests=requests)  # fmt: skip
    except (PlatformError, IntegrityError, OSError) as exc:
        print(f"sealtrace: could not tell the server how run {lease.run_id} ended: {exc}",
              file=sys.stderr, flush=True)  # fmt: skip
    return code


def run_recorded(
    recipient: Recipient,
    output: str,
    command: Sequence[str],
    *,
    app_roots: Sequence[str] = (),
    env_allow: Sequence[str] = (),
    run_id: str | None = None,
    look_first: bool = True,
    on_start: Callable[[], None] | None = None,
    summary: dict[str, Any] | None = None,
) -> int:
    """Run `command` recorded into `output`; the program's exit status. With `summary`, the
    recorder's account of the run (its request count) is put there when the run ends."""
    python, target = parse_command(list(command))
    if target.kind == "script" and not os.path.isfile(target.value):
        raise UsageError(f"can't open file {target.value!r}: no such file")
    store = open_store(output)
    if look_first and store.list().objects:
        raise UsageError(f"{store.location} already holds a recording; recordings are written once")
    roots = list(app_roots) or [
        os.path.dirname(os.path.realpath(target.value)) if target.kind == "script" else os.getcwd()
    ]
    for root in roots:
        if not os.path.isdir(root):
            raise UsageError(f"--app-root {root} is not a directory")
    env = dict(os.environ)
    seed = env.get("PYTHONHASHSEED")
    if seed is None or seed == "random":
        env["PYTHONHASHSEED"] = str(1 + secrets.randbelow(4294967295))
    config: dict[str, Any] = {
        "recipient": recipient.to_text(),
        "store": output,
        "run_id": run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}",
        "app_roots": [os.path.abspath(r) for r in roots],
        "env_allow": list(env_allow),
        "target": target.as_dict(),
    }
    if summary is None:
        argv = [python, *target.python_options, "-c", BOOT_CODE, json.dumps(config)]
        return _run_child(argv, env, on_start=on_start)
    with tempfile.TemporaryDirectory(prefix="sealtrace-summary-") as private:
        fifo = os.path.join(private, "summary")
        os.mkfifo(fifo, 0o600)
        # Held open for reading from the start, so the recorder's non-blocking open for
        # writing at the end finds a reader; never inherited by the child.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            config["summary_fifo"] = fifo
            argv = [python, *target.python_options, "-c", BOOT_CODE, json.dumps(config)]
            code = _run_child(argv, env, on_start=on_start)
            summary.update(_read_summary(reader))
        finally:
            os.close(reader)
    return code


def _read_summary(fd: int) -> dict[str, Any]:
    """What the recorder wrote before the program exited (nothing, if it wrote nothing).
    Never waits (the descriptor is non-blocking)."""
    try:
        data = os.read(fd, 4096)
        fields = json.loads(data) if data else {}
    except (OSError, ValueError):
        return {}
    return fields if isinstance(fields, dict) else {}


def _run_child(
    argv: list[str], env: dict[str, str], *, on_start: Callable[[], None] | None = None
) -> int:
    try:
        # Stdio only (close_fds), and the program's own core limit back (restore_in_child).
        child = subprocess.Popen(argv, env=env, close_fds=True, preexec_fn=restore_in_child())
    except OSError as exc:
        raise UsageError(f"cannot start {argv[0]}: {exc.strerror}") from None
    if on_start is not None:
        on_start()
    # A terminal's ^C reaches the child directly; a SIGTERM or SIGHUP sent to us is passed on,
    # so the program (not this wrapper) decides how to end and the recording ends with it.
    forwarded = (signal.SIGTERM, signal.SIGHUP)
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for sig in forwarded:
        previous[sig] = signal.signal(sig, lambda number, _frame: child.send_signal(number))
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
