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
import fcntl
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._boot import boot_command
from ._errors import IntegrityError, UsageError
from ._format import HEADER_OBJECT, RecordingHeader
from ._inspect import describe_recording
from ._keys import Recipient
from ._launch import parse_command
from ._platform import Lease, PlatformClient, PlatformError
from ._record_token import refuse_if_visible, restore_in_child
from ._rotation import LEASE_RECORD, decode_lease, encode_lease
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
    rotate_requests: int | None = None,
    rotate_bytes: int | None = None,
) -> int:
    """Record under a key leased from the server, register the run once its header is
    written, and finish it when the program ends. Without a lease the program runs
    unrecorded, and says so once. A rotated recording's next runs (`rotate_requests`,
    `rotate_bytes`) and a Python child's own run go on under keys leased here too
    (PlatformRuns), each registered as its header appears and finished at the end."""
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
    base = base.rstrip("/")
    name = service or (os.path.basename(target.value) if target.kind != "code" else "python -c")
    rotating = rotate_requests is not None or rotate_bytes is not None
    runs = PlatformRuns(
        platform, base, service=name, first=lease.run_id, ahead=2 if rotating else 1
    )
    done = threading.Event()

    def watch() -> None:
        while True:
            runs.register_new()
            runs.top_up()
            if done.wait(0.2):
                return

    watcher = threading.Thread(target=watch, name="sealtrace-register", daemon=True)
    # A freshly leased run's location is new: no need to look first, and a store that cannot
    # be reached must not keep the program from running (the recorder reports it once). The
    # watcher starts once the program has: no thread of ours runs while it is forked.
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sealtrace-record-") as private:
        runs.open_feed(os.path.join(private, "leases"))
        code = run_recorded(lease.recipient, f"{base}/{lease.run_id}", command,
                            app_roots=app_roots, env_allow=env_allow, run_id=lease.run_id,
                            look_first=False, on_start=watcher.start, summary=summary,
                            rotate_requests=rotate_requests, rotate_bytes=rotate_bytes,
                            lease_fifo=runs.feed_path)  # fmt: skip
        done.set()
        watcher.join()
        runs.close_feed()
    runs.register_new()  # a header may have come at the very end
    runs.finish_all(code, summary)
    return code


class PlatformRuns:
    """The runs of one recorded program, as `sealtrace record --server` tells the server of
    them: the first run's lease, then each lease handed to the recorder through the feed (a
    FIFO: _rotation.py) for a rotation or a Python child, each registered once its header is
    in the store and finished when the program ends. A lease handed out but never taken goes
    back to the host's lease pool, for the next run."""

    def __init__(
        self, platform: PlatformClient, base: str, *, service: str, first: str, ahead: int
    ) -> None:
        self._platform = platform
        self._base = base
        self._service = service
        self._ahead = ahead  # leases kept waiting in the feed: a rotation does not wait
        self._leases: dict[str, Lease] = {}
        self._said = {platform.notice}  # what the pool's state was said to be, once each
        self.handed = [first]  # run ids, in the order their leases were handed out
        self.registered: dict[str, Any] = {}  # run id -> its store
        self._stores: dict[str, Any] = {}  # run id -> its store, opened once
        self.feed_path: str | None = None
        self._feed: int | None = None

    def open_feed(self, path: str) -> None:
        os.mkfifo(path, 0o600)
        # Read-write, so the FIFO holds what is written whether or not a reader has it open.
        self._feed = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self.feed_path = path
        self.top_up()

    def top_up(self) -> None:
        if self._feed is None:
            return
        waiting = int.from_bytes(fcntl.ioctl(self._feed, termios.FIONREAD, b"\0" * 4), "little")
        while waiting < self._ahead * LEASE_RECORD:
            lease = self._platform.lease()
            self._say(self._platform.notice)
            if lease is None:
                return  # (the server's back-off applies; the next rotation waits for one)
            os.write(self._feed, encode_lease(lease.run_id, lease.recipient.raw))
            self.handed.append(lease.run_id)
            self._leases[lease.run_id] = lease
            waiting += LEASE_RECORD

    def close_feed(self) -> None:
        """Take back the leases never taken, and close the feed."""
        if self._feed is None:
            return
        unused = []
        with contextlib.suppress(OSError):
            while len(record := os.read(self._feed, LEASE_RECORD)) == LEASE_RECORD:
                found = decode_lease(record)
                if found is not None:
                    unused.append(found[0])
        os.close(self._feed)
        self._feed = None
        back = [self._leases[run_id] for run_id in unused if run_id in self._leases]
        for taken in back:
            self.handed.remove(taken.run_id)
        try:
            self._platform.give_back(back)
            self._say(self._platform.notice)
        except (PlatformError, OSError) as exc:  # (the pool unusable: the leases lapse)
            self._say(f"could not keep {len(back)} unused lease(s): {exc}")

    def _say(self, notice: str) -> None:
        if notice and notice not in self._said:
            self._said.add(notice)
            print(f"sealtrace: {notice}", file=sys.stderr, flush=True)

    def register_new(self) -> None:
        for run_id in self.handed:
            if run_id in self.registered:
                continue
            with contextlib.suppress(Exception):  # the store may not be reachable at all
                store = self._stores.get(run_id) or open_store(f"{self._base}/{run_id}")
                self._stores[run_id] = store
                if HEADER_OBJECT in store.list().objects:
                    wrapped = RecordingHeader.decode(store.get(HEADER_OBJECT)).wrapped_key
                    self._platform.register(run_id, wrapped, store=f"{self._base}/{run_id}",
                                            service=self._service,
                                            host=socket.gethostname())  # fmt: skip
                    self.registered[run_id] = store

    def finish_all(self, code: int, summary: dict[str, Any]) -> None:
        counts = _run_counts(summary, self.handed[0])
        for run_id in self.handed:
            store = self.registered.get(run_id)
            if store is None:
                self._tell(run_id, "failed", exit_status=code,
                           detail="the recording never reached the store")  # fmt: skip
                continue
            try:
                claims = describe_recording(store).completeness.startswith("claims complete")
            except (IntegrityError, OSError) as exc:
                self._tell(run_id, "incomplete", exit_status=code, detail=str(exc))
                continue
            self._tell(run_id, "complete" if claims else "incomplete", exit_status=code,
                       requests=counts.get(run_id))  # fmt: skip

    def _tell(self, run_id: str, status: str, **fields: Any) -> None:
        try:
            self._platform.finish(run_id, status, **fields)
        except (PlatformError, OSError) as exc:
            print(f"sealtrace: could not tell the server how run {run_id} ended: {exc}",
                  file=sys.stderr, flush=True)  # fmt: skip


def _run_counts(summary: dict[str, Any], first: str) -> dict[str, int]:
    """Each run's request count, as the recorder summed them up (its latest runs; a recorder
    that did not rotate may say only the total, the first run's)."""
    counts: dict[str, int] = {}
    runs = summary.get("runs")
    for entry in runs if isinstance(runs, list) else []:
        if (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], str)
            and type(entry[1]) is int
        ):
            counts[entry[0]] = entry[1]
    total = summary.get("requests")
    if not counts and type(total) is int:
        counts[first] = total
    return counts


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
    rotate_requests: int | None = None,
    rotate_bytes: int | None = None,
    lease_fifo: str | None = None,
) -> int:
    """Run `command` recorded into `output`; the program's exit status. With `summary`, the
    recorder's account of the run (its request count) is put there when the run ends. With
    `rotate_requests`/`rotate_bytes` the run rotates to runs beside `output` (OUTPUT.2, ...)."""
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
        "rotate_requests": rotate_requests,
        "rotate_bytes": rotate_bytes,
        "lease_fifo": lease_fifo,
    }
    if summary is None:
        argv = boot_command(python, target, config)
        return _run_child(argv, env, on_start=on_start)
    with tempfile.TemporaryDirectory(prefix="sealtrace-summary-") as private:
        fifo = os.path.join(private, "summary")
        os.mkfifo(fifo, 0o600)
        # Held open for reading from the start, so the recorder's non-blocking open for
        # writing at the end finds a reader; never inherited by the child.
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            config["summary_fifo"] = fifo
            argv = boot_command(python, target, config)
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
    # A SIGTERM or SIGHUP sent to us is passed on, so the program (not this wrapper) decides
    # how to end and the recording ends with it. The handlers go in before the child starts:
    # one that arrives before there is a child to pass it to is kept and passed on at once
    # (else it would end this wrapper and leave the program running unwatched). A caught
    # signal is reset by exec, so the program starts with its own defaults.
    forwarded = (signal.SIGTERM, signal.SIGHUP)
    started: list[subprocess.Popen[bytes]] = []
    early: list[int] = []

    def forward(number: int, _frame: object) -> None:
        if started:
            started[0].send_signal(number)
        else:
            early.append(number)

    previous = {sig: signal.signal(sig, forward) for sig in forwarded}
    try:
        try:
            # Stdio only (close_fds), and the program's own core limit back (restore_in_child).
            child = subprocess.Popen(argv, env=env, close_fds=True, preexec_fn=restore_in_child())
        except OSError as exc:
            raise UsageError(f"cannot start {argv[0]}: {exc.strerror}") from None
        started.append(child)
        # A terminal's ^C reaches the child directly (ignored only after it started, since an
        # ignored signal stays ignored across exec).
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
        for number in early:
            child.send_signal(number)
        if on_start is not None:
            on_start()
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
