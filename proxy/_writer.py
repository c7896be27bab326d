"""The streaming sealing writer: plaintext in, immutable sealed objects out.

Memory is bounded by one segment buffer and one chunk buffer, both allocated once and reused;
whole chunks of a large write() are encrypted straight from the caller's buffer into the
segment buffer. The writer holds the latest chunk back until it knows whether more data
follows, so the final chunk of the recording and the last chunk of each segment carry their
flags inside the authenticated nonce/AAD.

flush() makes everything written so far durable as a complete segment object: a writer killed
after a flush leaves a recording that opens up to that point and reports itself incomplete.

Keys: os.urandom hands the recording key over as bytes, which are dropped once the key is
wrapped and copied into a Secret (freed, not wiped: Python cannot wipe bytes). The writer keeps
that Secret, and the AEAD object made from the body key, until it closes: a process the
recorded one forks seals its own stream under a body key derived from it (`for_process`, in
the forked child), and the Secret is wiped when the writer closes or aborts. The recording key
opens nothing the recording process could not already read, since it wrote it.
"""

from __future__ import annotations

import os
import time
from types import TracebackType

from ._errors import StorageError
from ._format import (
    AAD,
    CHUNK_PREFIX,
    CONTINUES_OBJECT,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_SEGMENT_SIZE,
    FLAG_FINAL,
    FLAG_SEGMENT_END,
    FORMAT_VERSION,
    HEADER_OBJECT,
    NONCE,
    RECORDING_KEY_SIZE,
    SEGMENT_HEADER,
    SEGMENT_MAGIC,
    TAG_SIZE,
    Continuation,
    RecordingHeader,
    body_cipher,
    check_sizes,
    header_digest,
    seal_continuation,
    segment_capacity,
    segment_name,
    valid_process_path,
    validate_run_id,
    wrap_recording_key,
)
from ._keys import Recipient
from ._secret import Secret
from ._store import BytesLike, RecordingSink

__all__ = ["SealedWriter"]


class SealedWriter:
    def __init__(
        self,
        sink: RecordingSink,
        recipient: Recipient,
        run_id: str,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        previous: Continuation | None = None,
    ) -> None:
        """A new recording. With `previous` it is a continuation (a run the recorder rotated
        to): its `continues` object names that run and carries its key (seal_continuation)."""
        validate_run_id(run_id)
        check_sizes(chunk_size, segment_size)
        self._sink = sink
        self._chunk_size = chunk_size
        self.run_id = run_id
        recording_key = os.urandom(RECORDING_KEY_SIZE)
        header = RecordingHeader(
            run_id=run_id,
            chunk_size=chunk_size,
            segment_size=segment_size,
            created_unix_ms=time.time_ns() // 1_000_000,
            wrapped_key=wrap_recording_key(recording_key, recipient, run_id),
        ).encode()
        self._start(Secret.copy_of(recording_key), header_digest(header), segment_size, "")
        del recording_key
        self._put(HEADER_OBJECT, header)
        if previous is not None:
            assert self._key is not None
            self._put(CONTINUES_OBJECT, seal_continuation(self._key, self.header_digest, previous))

    def continuation(self, location: str) -> Continuation:
        """This recording as the run it rotates to names it (its stream goes on there from
        where it ends): a copy of the key, for seal_continuation, which the caller wipes.
        `location`: this run's location's name (the store's `name`)."""
        if self._key is None:
            raise ValueError("the writer has closed")
        return Continuation(
            self.run_id, location, self.process, self.header_digest,
            Secret.copy_of(self._key.view()),
        )  # fmt: skip

    @classmethod
    def for_process(cls, parent: SealedWriter, sink: RecordingSink, process: str) -> SealedWriter:
        """A writer for the stream of forked process `process` ("1", "1.2": valid_process_path),
        made in that process from the copy of the writer it inherited, which is then dropped:
        the same recording (header, sizes), a body key of the process's own and segments named
        for it (segment_name). It writes no header."""
        if not process or not valid_process_path(process):
            raise ValueError(f"not a forked process's path: {process!r}")
        if parent._key is None:
            raise ValueError("the parent's writer has closed")
        child = cls.__new__(cls)
        child._sink = sink
        child._chunk_size = parent._chunk_size
        child.run_id = parent.run_id
        child._start(
            Secret.copy_of(parent._key.view()),
            parent.header_digest,
            parent._segment_size,
            process,
        )
        # The inherited copy: this process never writes the parent's stream. Its buffers stay
        # (the parent's pipeline thread may have held views of them when the process forked).
        parent._wipe_key()
        parent._aead = None  # type: ignore[assignment]
        parent._closed = True
        return child

    def _start(self, key: Secret, digest: bytes, segment_size: int, process: str) -> None:
        chunk_size = self._chunk_size
        self.header_digest = digest
        self.process = process
        self._key: Secret | None = key
        self._aead = body_cipher(key, digest, process)
        self._segment_size = segment_size
        self._capacity = segment_capacity(chunk_size, segment_size)
        record = CHUNK_PREFIX.size + chunk_size + TAG_SIZE
        # One segment buffer for the writer's life, allocated up front and reused for every
        # segment (allocating per segment would pay page faults again each time).
        self._segment = bytearray(SEGMENT_HEADER.size + self._capacity * record)
        self._segment_view = memoryview(self._segment)
        self._pending = bytearray(chunk_size)
        self._pending_view = memoryview(self._pending)
        self._pending_len = 0
        self._nonce = bytearray(NONCE.size)
        self._aad = bytearray(AAD.size)
        self._segment_index = 0
        self._segment_chunks = 0
        self._used = 0
        self._counter = 0
        self._closed = False
        self._broken: str | None = None
        self.plaintext_bytes = 0

    @property
    def chunks_sealed(self) -> int:
        return self._counter

    @property
    def segments_written(self) -> int:
        return self._segment_index

    def write(self, data: BytesLike) -> None:
        self._check_open()
        view = memoryview(data).cast("B")
        total, pos = len(view), 0
        if total == 0:
            return
        self.plaintext_bytes += total
        size = self._chunk_size
        if self._pending_len:
            take = min(size - self._pending_len, total)
            self._pending[self._pending_len : self._pending_len + take] = view[:take]
            self._pending_len += take
            pos = take
            if pos == total:
                return
            # More data follows, so the held chunk (now full) is not the last one.
            self._seal(self._pending_view, 0)
            self._pending_len = 0
        while total - pos > size:
            self._seal(view[pos : pos + size], 0)
            pos += size
        rest = total - pos
        self._pending[:rest] = view[pos:]
        self._pending_len = rest

    def flush(self) -> None:
        """Seal what is held and write the current segment as a complete object."""
        self._check_open()
        if self._pending_len or self._segment_chunks:
            self._seal(self._pending_view[: self._pending_len], FLAG_SEGMENT_END)
            self._pending_len = 0

    def close(self) -> None:
        """Seal the final chunk. Only a closed writer produces a complete recording."""
        if self._closed:
            return
        self._check_open()
        self._seal(self._pending_view[: self._pending_len], FLAG_FINAL | FLAG_SEGMENT_END)
        self._pending_len = 0
        self._closed = True
        self._drop_key()

    def abort(self) -> None:
        """Make what was written durable without finalising: the recording reads as incomplete."""
        if self._closed or self._broken:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            self._drop_key()

    def __enter__(self) -> SealedWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _check_open(self) -> None:
        if self._broken:
            raise StorageError(f"the writer stopped after a storage failure: {self._broken}")
        if self._closed:
            raise ValueError("write to a closed recording")

    def _drop_key(self) -> None:
        self._aead = None  # type: ignore[assignment]
        self._wipe_key()
        self._segment_view.release()

    def _wipe_key(self) -> None:
        if self._key is not None:
            self._key.wipe()
            self._key = None

    def _seal(self, plaintext: memoryview, flags: int) -> None:
        seg = self._segment
        if self._segment_chunks == 0:
            SEGMENT_HEADER.pack_into(
                seg,
                0,
                SEGMENT_MAGIC,
                FORMAT_VERSION,
                self._segment_index,
                self._counter,
                self.header_digest,
            )
            self._used = SEGMENT_HEADER.size
        if self._segment_chunks + 1 == self._capacity:
            flags |= FLAG_SEGMENT_END
        length = len(plaintext) + TAG_SIZE
        NONCE.pack_into(self._nonce, 0, self._counter, flags & FLAG_FINAL)
        AAD.pack_into(self._aad, 0, self.header_digest, self._segment_index, flags)
        CHUNK_PREFIX.pack_into(seg, self._used, length, flags)
        start = self._used + CHUNK_PREFIX.size
        self._aead.encrypt_into(
            self._nonce, plaintext, self._aad, self._segment_view[start : start + length]
        )
        self._used = start + length
        self._counter += 1
        self._segment_chunks += 1
        if flags & FLAG_SEGMENT_END:
            self._put(
                segment_name(self._segment_index, self.process), self._segment_view[: self._used]
            )
            self._segment_index += 1
            self._segment_chunks = 0
            self._used = 0

    def _put(self, name: str, data: BytesLike) -> None:
        try:
            self._sink.put(name, data)
        except StorageError as exc:
            self._broken = str(exc)
            raise
