"""The recorder's background thread: the event stream is hashed, sealed and stored here.

The application's thread only appends encoded records to a buffer and hands each full buffer
over (`send`); everything that costs time per byte (the BLAKE2b stream digest, AES-GCM sealing,
writing or uploading the sealed objects) happens on this thread, in the order the buffers were
handed over. Hashing and the store's I/O release the GIL, so on a machine with a spare core
that work overlaps the application instead of delaying it.

It must never block the application: `send` only queues, and raises OSError once the thread
has failed or has fallen more than `max_pending` bytes behind. The recorder turns that into the
end of the recording; the application carries on. Only `close` waits, at the end of the run,
and only for as long as it is told to.

Nor should it take turns with the application for a CPU: the thread lowers its own priority
(NICE) when it starts, so its work runs on what the application's threads leave idle. Its work
is a few percent of the application's CPU time, which the lower priority still gets when every
CPU is busy (a nice of 10 against 0 is about a tenth of a shared CPU).
"""

from __future__ import annotations

import _thread
import os
import queue
import sys
from collections.abc import Callable
from typing import Any, Protocol

from ._store import BytesLike, RecordingSink
from ._stream import stream_digest

__all__ = ["StreamPipeline", "StreamWriter"]

_start_thread = _thread.start_new_thread  # captured before the boundary replaces it
_allocate_lock = _thread.allocate_lock  # (a forked child makes a pipeline under the boundary)
_get_ident = _thread.get_ident

# How much the thread lowers its priority (its nice value). At the application's priority, its
# work (some 14 us of CPU a request on bench/record_overhead.py's I/O-bound workload) added
# about 7 us a request to the application's time, a third of what recording added in all.
NICE = 10


def _lower_priority() -> int | None:
    """Lowers the calling thread's priority by NICE: its nice value, or None where that is
    refused or a thread has no nice value of its own (it is per process but on Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return os.nice(NICE)
    except OSError:
        return None


class StreamWriter(Protocol):
    """What the pipeline seals into: a SealedWriter."""

    def write(self, data: BytesLike) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


# Jobs, in the order they were queued. The application's thread makes every one of them.
_PUT, _RECORDS, _END, _ABORT, _STOP, _SETTLE = range(6)


class StreamPipeline:
    """Hashes, seals and stores the event stream on a thread of its own.

    It is also the RecordingSink of the SealedWriter it seals into: objects the writer makes
    on the application's thread (its header, when created) are queued like everything else;
    objects it makes on this thread are stored directly.
    """

    def __init__(self, sink: RecordingSink, *, max_pending: int = 64 * 1024 * 1024) -> None:
        self.location = getattr(sink, "location", "sink")
        self._sink = sink
        self._writer: StreamWriter | None = None
        self._hasher = stream_digest()
        self._jobs: queue.SimpleQueue[tuple[int, Any, Any]] = queue.SimpleQueue()
        # Bytes queued and bytes done: each counter has one writer, so no lock is needed.
        self._queued = 0
        self._done = 0
        self._max_pending = max_pending
        self.error: str | None = None
        self._finished = _allocate_lock()
        self._finished.acquire()
        self._thread = 0  # set by the thread itself, before its first job
        self.nice: int | None = None  # the thread's nice value, once it has lowered it
        _start_thread(self._run, ())

    def attach(self, writer: StreamWriter) -> None:
        """The writer built on this pipeline; records are sealed into it."""
        self._writer = writer

    # -- the application's thread -----------------------------------------------------------

    def put(self, name: str, data: BytesLike) -> None:
        if _get_ident() == self._thread:
            self._sink.put(name, data)
        else:
            self._queue(_PUT, bytes(data), name)

    def send(
        self,
        records: bytearray,
        unhashed: int = 0,
        *,
        flush: bool = False,
        finish: Callable[[bytearray, int], bytes | bytearray] | None = None,
    ) -> None:
        """Hand over a buffer of whole records (the pipeline owns it from now on); the first
        `unhashed` bytes are sealed but not part of the stream digest (the stream prefix).
        `finish`, if given, makes the final records from it first, on this thread."""
        self._queue(_RECORDS, records, (unhashed, flush, finish))

    def end(self, last: Callable[[bytes], bytes] | None = None) -> None:
        """Seal the end of the stream. `last` makes the final record from the stream digest
        of everything before it (EXIT), on the pipeline's thread."""
        self._queue(_END, last, None)

    def retire(self, last: Callable[[bytes], bytes] | None = None) -> None:
        """end(last), then let the thread finish by itself once it has stored everything (a
        rotated run's: its recording goes on through another pipeline). close() still waits
        for it and tells its error."""
        self.end(last)
        self._jobs.put((_STOP, None, None))

    def finished(self) -> bool:
        """Whether the thread has ended (after close() or retire())."""
        return not self._finished.locked()

    def abort(self) -> None:
        """Make what was sealed so far durable without finishing: it opens as incomplete."""
        if self.error is None:
            self._jobs.put((_ABORT, None, None))

    @property
    def writer(self) -> StreamWriter | None:
        return self._writer

    def settle(self, timeout: float) -> int:
        """Wait until every job queued so far is done (the thread then idles, holding no lock
        of its own): how many plaintext bytes of the stream were sealed, all of them. OSError
        if the thread failed or did not finish in time. The recorder calls it before the
        program forks, so the child knows where its copy of the stream ends."""
        done = _allocate_lock()
        done.acquire()
        self._queue(_SETTLE, b"", done)
        if not done.acquire(timeout=timeout):
            raise OSError(f"the store {self.location} did not catch up within {timeout:g}s")
        if self.error is not None:
            raise OSError(self.error)
        return int(getattr(self._writer, "plaintext_bytes", 0))

    def close(self, timeout: float) -> str | None:
        """Wait for every queued job; the error, if any, else None."""
        self._jobs.put((_STOP, None, None))
        if not self._finished.acquire(timeout=timeout):
            return f"the store {self.location} did not finish within {timeout:g}s"
        self._finished.release()  # (it stays finished: a second close returns at once)
        return self.error

    def _queue(self, job: int, item: Any, detail: Any) -> None:
        if self.error is not None:
            raise OSError(self.error)
        size = 0 if job == _END else len(item)
        if self._queued + size - self._done > self._max_pending:
            raise OSError(
                f"the store {self.location} is more than {self._max_pending} bytes behind"
            )
        self._queued += size
        self._jobs.put((job, item, detail))

    # -- the pipeline's thread --------------------------------------------------------------

    def _run(self) -> None:
        self._thread = _get_ident()
        self.nice = _lower_priority()
        try:
            while True:
                job, item, detail = self._jobs.get()
                if job == _STOP:
                    return
                if job == _SETTLE:
                    detail.release()
                    continue
                if self.error is None:
                    try:
                        self._do(job, item, detail)
                    except Exception as exc:
                        self.error = f"{exc.__class__.__name__}: {exc}"
                if job in (_PUT, _RECORDS):
                    self._done += len(item)
        finally:
            self._finished.release()

    def _do(self, job: int, item: Any, detail: Any) -> None:
        if job == _PUT:
            self._sink.put(detail, item)
            return
        writer = self._writer
        assert writer is not None, "records sent before a writer was attached"
        if job == _RECORDS:
            unhashed, flush, finish = detail
            if finish is not None:
                item = finish(item, unhashed)
            self._hasher.update(memoryview(item)[unhashed:])
            writer.write(item)
            if flush:
                writer.flush()
        elif job == _END:
            if item is not None:
                writer.write(item(self._hasher.digest()))
            writer.close()
        elif job == _ABORT:
            writer.abort()
