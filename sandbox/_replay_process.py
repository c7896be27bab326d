"""Replaying a recording locally: open it, check this interpreter can replay it, run the
replaying process, and return its receipt.

The plaintext goes from memory to the replaying process through a pipe; it is never written
to a file. The replaying process gets the recorded environment (only the allowed variables),
hash seed and python options, and nothing else from ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sealtrace.proxy import Identity, IncompleteRecordingError, open_store
from sealtrace.proxy.format import (
    CodecError,
    ParsedStream,
    incomplete_stream,
    parse_stream,
    read_meta,
    read_process,
)

from ._errors import DivergenceError, ReplayCrashedError, ReplayEnvironmentError
from ._layout import unrandomized_children

__all__ = [
    "Plaintext",
    "Receipt",
    "give_back_freed_memory",
    "load_recording",
    "replay",
    "replay_location",
]

CHILD_CODE = "from sealtrace.sandbox._replay import main\nmain()\n"
_STDERR_TAIL = 2000


@dataclass
class Receipt:
    data: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.data.get("status"))

    @property
    def exact(self) -> bool:
        return self.status == "bit-exact"

    def message(self) -> str:
        d = self.data
        div = d.get("divergence")
        if self.status == "stopped":
            stop = d.get("stop") or {}
            return (
                f"the recording stops at event {d['events_replayed']}: {stop.get('reason')} at "
                f"{stop.get('where')}; replay matched everything up to there but cannot go on"
            )
        if div is None:
            rotated = (d.get("stop") or {}).get("continued_in")
            if rotated:
                return f"replay is bit-exact to the end of the run, which goes on in run {rotated}"
            return "replay is bit-exact"
        where = div.get("location")
        if div.get("app_location") and div.get("app_location") != where:
            where = f"{div['app_location']} (in {where})"
        text = (
            f"divergence at event {div['event']}: expected {div['expected']} but the program "
            f"made {div['actual']} at {where}"
        )
        if "offset" in div:
            text += (
                f"; output differs at byte {div['offset']}: recorded {div['expected_bytes']!r}, "
                f"got {div['actual_bytes']!r}"
            )
        threads = div.get("threads")
        if threads:
            where = "; ".join(
                f"{t['index']} {t['name']} {t['state']}"
                + (f" at {t['location']}" if t.get("location") else "")
                + (f", running {t['runs']}" if t.get("runs") else "")
                for t in threads
            )
            text += (
                f" (in thread {div.get('thread')}). The program's threads: {where}. A "
                "data race between threads (state shared without a lock or queue) takes a "
                "replay another way"
            )
        return text


def load_recording(
    location: str,
    identity: Identity,
    run_id: str | None = None,
    process: str = "",
    *,
    allow_incomplete: bool = False,
) -> tuple[bytes, ParsedStream]:
    """The verified plaintext and its parsed event stream: the recorded process's, or a
    forked process's (`process`: "1", "1.2", ...; its ancestors' streams up to their forks,
    then its own). `allow_incomplete`: a recording that never got its end (a killed process)
    is read as far as it goes, ending in a STOP that says so (incomplete_stream)."""
    data = _plaintext(location, identity, run_id, process, allow_incomplete=allow_incomplete)
    return data, parse_stream(data)


def _plaintext(
    location: str,
    identity: Identity,
    run_id: str | None,
    process: str = "",
    *,
    allow_incomplete: bool = False,
) -> bytes:
    data, status = read_process(
        open_store(location), identity, expected_run_id=run_id, process=process
    )
    if not status.complete:
        whose = f"process {process} of the recording" if process else "the recording"
        if not allow_incomplete or not status.chunks:
            raise IncompleteRecordingError(
                f"{whose} at {location} is {status.describe()}; replay needs the whole run "
                "(--allow-incomplete replays it as far as it goes)",
                chunks=status.chunks,
            )
        return incomplete_stream(data)
    return data


def _child_env(meta: dict[str, Any]) -> dict[str, str]:
    env = dict(meta["env"])
    seed = meta.get("hash_seed")
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    utf8 = (meta.get("flags") or {}).get("utf8_mode")
    if utf8 is not None and "PYTHONUTF8" not in env:
        # Python turns UTF-8 mode on by itself under the C locale (a bare container):
        # replay runs in the mode the recording ran in, whatever this host's locale.
        env["PYTHONUTF8"] = str(int(utf8))
    zone = (meta.get("timezone") or {}).get("zone")
    if zone and "TZ" not in env:
        env["TZ"] = zone
    return env


def give_back_freed_memory() -> None:
    """Hand the heap the C library kept after a recording was decrypted and parsed back to
    the system (glibc keeps freed small blocks; a process that then waits on its passes would
    hold them for nothing). Elsewhere, nothing to do. ctypes is loaded here only: the
    replaying process must not load it (sandbox/_layout.py)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


class Plaintext:
    """A verified recording's plaintext as a process keeps it between the passes it feeds:
    compressed, a MiB at a time (a recording is mostly the program's input: text, rows,
    requests), so it costs a fraction of its size while every pass replays it in full. It
    never leaves this process's memory."""

    _CHUNK = 1 << 20

    def __init__(self, data: bytes) -> None:
        view = memoryview(data)
        self._chunks = [
            zlib.compress(view[i : i + self._CHUNK], 1) for i in range(0, len(view), self._CHUNK)
        ]
        self.size = len(data)

    def chunks(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            yield zlib.decompress(chunk)


def replay(
    data: bytes | Plaintext,
    meta: dict[str, Any],
    *,
    timeout: float | None = None,
    query: dict[str, Any] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> Receipt:
    """Run the replaying process over `data` (a plaintext event stream).

    With a query, the provenance engine is attached and the receipt's status is "query"
    with the pass's "result" (sealtrace.sandbox._provenance), unless replay diverged first.
    """
    options = list(meta["target"]["python_options"])
    input_read, input_write = os.pipe()
    result_read, result_write = os.pipe()
    argv = [sys.executable, *options, "-c", CHILD_CODE, str(input_read), str(result_write)]
    # The query goes through a pipe of its own, never the command line: it can hold the
    # session's digest key, and /proc/*/cmdline is readable by every process of the machine.
    query_read, query_write = os.pipe() if query is not None else (-1, -1)
    if query is not None:
        argv.append(str(query_read))
    # A pass that answers a query starts with its address-space layout fixed (_layout).
    layout = unrandomized_children() if query is not None else contextlib.nullcontext()
    try:
        with layout:
            child = subprocess.Popen(
                argv,
                pass_fds=tuple(fd for fd in (input_read, result_write, query_read) if fd >= 0)
                + pass_fds,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=_child_env(meta),
                cwd="/",
            )
    finally:
        os.close(input_read)
        os.close(result_write)
        if query_read >= 0:
            os.close(query_read)

    def write_all(fd: int, payload: bytes | Plaintext) -> None:
        try:
            for chunk in payload.chunks() if isinstance(payload, Plaintext) else (payload,):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view[: 1 << 20]) :]
        except BrokenPipeError:
            pass
        finally:
            os.close(fd)

    # Each pipe is fed by a thread of its own: the child reads the recording whole, then the
    # query, and either can be larger than a pipe holds (a capture of 10,000 steps is), so
    # one thread writing both, in any order, could wait on a child that waits on the other.
    feeds = [(input_write, data)]
    if query is not None:
        feeds.append((query_write, json.dumps(query).encode()))
    feeders = [threading.Thread(target=write_all, args=feed, daemon=True) for feed in feeds]
    for feeder in feeders:
        feeder.start()
    stderr_chunks: list[bytes] = []
    drain = threading.Thread(target=lambda: stderr_chunks.append(child.stderr.read()), daemon=True)  # type: ignore[union-attr]
    drain.start()
    # The receipt is read beside the wait, so a pass that never ends (blocked on a descriptor
    # it was given, or looping) is killed at the timeout instead of holding the session.
    received: list[bytes] = []
    results = os.fdopen(result_read, "rb")
    reader = threading.Thread(target=lambda: received.append(results.read()), daemon=True)
    reader.start()
    try:
        code = child.wait(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        for thread, stream in ((reader, results), (drain, child.stderr)):
            thread.join(5.0)  # a descendant may still hold the pipe: not for long
            if not thread.is_alive() and stream is not None:
                stream.close()
        raise ReplayCrashedError(f"replay did not finish within {timeout:g}s") from None
    reader.join()
    results.close()
    raw = b"".join(received)
    for feeder in feeders:
        feeder.join()
    drain.join()
    child.stderr.close()  # type: ignore[union-attr]
    try:
        receipt = json.loads(raw) if raw else None
    except ValueError:
        receipt = None
    if not isinstance(receipt, dict):
        tail = b"".join(stderr_chunks)[-_STDERR_TAIL:].decode("utf-8", "replace").strip()
        raise ReplayCrashedError(f"the replay process exited {code} without a receipt: {tail}")
    if receipt.get("status") == "corrupt":
        raise CodecError(f"the event stream is corrupt: {receipt.get('error')}")
    if receipt.get("status") == "environment":
        raise ReplayEnvironmentError(str(receipt.get("error")))
    return Receipt(receipt)


def replay_location(
    location: str,
    identity: Identity,
    *,
    run_id: str | None = None,
    timeout: float | None = None,
    process: str = "",
    allow_incomplete: bool = False,
) -> Receipt:
    # The replaying process parses and verifies the whole stream; here only META is needed.
    data = _plaintext(location, identity, run_id, process, allow_incomplete=allow_incomplete)
    return replay(data, read_meta(data), timeout=timeout)


def raise_for(receipt: Receipt) -> None:
    if not receipt.exact:
        raise DivergenceError(receipt.message())
