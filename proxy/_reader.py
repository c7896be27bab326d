"""The streaming reader: verifies and decrypts a sealed recording, chunk by chunk, in order.

It yields only authenticated plaintext, and ends with a status that says "complete" only when
the final chunk (whose flag is bound into its nonce) was authenticated. Everything that is not
exactly what one writer produced for this header — a flipped bit, a dropped, duplicated,
reordered or foreign segment, a cut inside a segment, trailing bytes — raises TamperedError at
the first bad byte. A missing tail (segments never written) is the one thing that is not an
error here: it is what a killed writer leaves, and it reads as incomplete after chunk N.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cryptography.exceptions import InvalidTag

from ._errors import RunIdMismatchError, TamperedError, UsageError
from ._format import (
    AAD,
    CHUNK_PREFIX,
    CONTINUES_OBJECT,
    FLAG_FINAL,
    FLAG_SEGMENT_END,
    FORMAT_VERSION,
    HEADER_OBJECT,
    KNOWN_FLAGS,
    MAX_CONTINUES_BYTES,
    NONCE,
    SEGMENT_HEADER,
    SEGMENT_MAGIC,
    TAG_SIZE,
    Continuation,
    RecordingHeader,
    body_cipher,
    header_digest,
    open_continuation,
    parse_segment_name,
    segment_capacity,
    segment_name,
    segment_process,
    unwrap_recording_key,
    valid_process_path,
)
from ._keys import Identity
from ._secret import Secret
from ._store import Listing, RecordingSource

__all__ = [
    "ChunkRecord",
    "RecordingStatus",
    "SealedReader",
    "iter_chunk_records",
    "previous_runs",
    "process_line",
    "process_paths",
    "read_header",
    "read_process",
]


@dataclass
class RecordingStatus:
    complete: bool = False
    chunks: int = 0  # authenticated chunks, counted from 0; "incomplete after chunk N-1"
    segments: int = 0
    plaintext_bytes: int = 0
    alarms: list[str] = field(default_factory=list)
    segment_chunks: list[int] = field(default_factory=list)  # authenticated, per segment read

    def describe(self) -> str:
        if self.complete:
            return f"complete: {self.chunks} chunks in {self.segments} segments"
        if self.chunks == 0:
            return "incomplete: no chunk was sealed"
        return f"incomplete after chunk {self.chunks - 1}: the final chunk was never written"


class ChunkRecord(NamedTuple):
    offset: int  # of the ciphertext within the segment object
    length: int  # ciphertext + tag
    flags: int


MAX_HEADER_BYTES = 4096


def read_segment(
    source: RecordingSource,
    listing: Listing,
    index: int,
    header: RecordingHeader,
    process: str = "",
) -> bytes:
    """One segment object, no larger than this header allows (_read_capped)."""
    name = segment_name(index, process)
    too_large = f"{name} is larger than any segment this recording can have"
    return _read_capped(source, listing, name, max_segment_bytes(header), too_large)


def _read_capped(
    source: RecordingSource, listing: Listing, name: str, limit: int, too_large: str
) -> bytes:
    """Object `name`, refused before it is read when its listed size is past `limit`, and
    read with a cap in case the listing under-reports it: never more than limit + 1 bytes."""
    if listing.objects[name].size > limit:
        raise TamperedError(too_large)
    data = source.get(name, limit=limit)
    if len(data) > limit:
        raise TamperedError(too_large)
    return data


def max_segment_bytes(header: RecordingHeader) -> int:
    capacity = segment_capacity(header.chunk_size, header.segment_size)
    return SEGMENT_HEADER.size + capacity * (CHUNK_PREFIX.size + header.chunk_size + TAG_SIZE)


def read_header(source: RecordingSource, listing: Listing) -> tuple[RecordingHeader, bytes]:
    """The decoded header and its digest; UsageError if nothing is stored at the location."""
    if HEADER_OBJECT not in listing.objects:
        if any(parse_segment_name(name) is not None for name in listing.objects):
            raise TamperedError(f"{source.location} has segments but no header")
        raise UsageError(f"no sealtrace recording at {source.location}")
    raw = _read_capped(source, listing, HEADER_OBJECT, MAX_HEADER_BYTES,
                       "header object is too large")  # fmt: skip
    return RecordingHeader.decode(raw), header_digest(raw)


def segment_names(listing: Listing, process: str = "") -> list[str]:
    """Segment names of one process's stream in order; TamperedError if one before the last
    present is missing."""
    found = (parse_segment_name(name, process) for name in listing.objects)
    indices = sorted(i for i in found if i is not None)
    for expected, index in enumerate(indices):
        if index != expected:
            raise TamperedError(
                f"{segment_name(expected, process)} is missing but later segments exist"
            )
    return [segment_name(i, process) for i in indices]


def process_paths(listing: Listing) -> list[str]:
    """The forked processes whose streams are stored ("1", "1.2", ...), in path order."""
    found = {path for name in listing.objects if (path := segment_process(name))}
    return sorted(found, key=lambda p: [int(part) for part in p.split(".")])


def iter_chunk_records(
    data: bytes | memoryview,
    index: int,
    header: RecordingHeader,
    digest: bytes,
    first_chunk: int | None,
    process: str = "",
) -> Iterator[ChunkRecord]:
    """Structural walk of one segment object (no decryption). Checks everything checkable
    without the key; first_chunk=None skips the counter-continuity check (for inspect)."""
    name = segment_name(index, process)
    if len(data) > max_segment_bytes(header):
        raise TamperedError(f"{name} is larger than any segment this recording can have")
    if len(data) < SEGMENT_HEADER.size:
        raise TamperedError(f"{name} is truncated inside its segment header")
    magic, version, seg_index, seg_first, seg_digest = SEGMENT_HEADER.unpack_from(data)
    if magic != SEGMENT_MAGIC or version != FORMAT_VERSION:
        raise TamperedError(f"{name} is not a version {FORMAT_VERSION} sealtrace segment")
    if seg_digest != digest:
        raise TamperedError(f"{name} belongs to another recording (header digest differs)")
    if seg_index != index:
        raise TamperedError(f"{name} holds segment {seg_index}: segments were moved or copied")
    if first_chunk is not None and seg_first != first_chunk:
        raise TamperedError(
            f"{name} starts at chunk {seg_first}, expected {first_chunk}: "
            "chunks were dropped or repeated"
        )
    pos, ended = SEGMENT_HEADER.size, False
    while pos < len(data):
        if ended:
            raise TamperedError(f"{name} has trailing bytes after its last chunk")
        if len(data) - pos < CHUNK_PREFIX.size:
            raise TamperedError(f"{name} is truncated inside a chunk header")
        length, flags = CHUNK_PREFIX.unpack_from(data, pos)
        pos += CHUNK_PREFIX.size
        if flags & ~KNOWN_FLAGS or not TAG_SIZE <= length <= header.chunk_size + TAG_SIZE:
            raise TamperedError(
                f"{name} has a malformed chunk header at byte {pos - CHUNK_PREFIX.size}"
            )
        if pos + length > len(data):
            raise TamperedError(f"{name} is truncated inside a chunk")
        yield ChunkRecord(pos, length, flags)
        pos += length
        ended = bool(flags & (FLAG_SEGMENT_END | FLAG_FINAL))
    if not ended:
        raise TamperedError(f"{name} ends without its closing chunk: the object was cut short")


class SealedReader:
    """Iterate to get verified plaintext chunks; `status` is final once iteration ends."""

    def __init__(
        self,
        source: RecordingSource,
        identity: Identity | None,
        *,
        expected_run_id: str | None = None,
        recording_key: Secret | None = None,
        process: str = "",
    ) -> None:
        """Open with the run's identity, or (an agent, given it sealed for its session) with
        the recording key itself; exactly one of the two. A key unwrapped here is wiped before
        this returns; a key passed in is the caller's to wipe (it is not needed once this
        returns: only the AESGCM object made from the body key is kept).

        `process` reads a forked process's own stream ("1", "1.2": see process_paths) instead
        of the recorded process's: the same header, its own body key and segments."""
        if not valid_process_path(process):
            raise UsageError(f'{process!r} is not a process path ("1", "1.2", ...)')
        self.process = process
        if (identity is None) == (recording_key is None):
            raise ValueError("a SealedReader opens with an identity or a recording key")
        self.source = source
        listing = source.list()
        self.header, self.header_digest = read_header(source, listing)
        if expected_run_id is not None and self.header.run_id != expected_run_id:
            raise RunIdMismatchError(
                f"the recording at {source.location} is run {self.header.run_id!r}, "
                f"not {expected_run_id!r}"
            )
        if identity is not None:
            with unwrap_recording_key(self.header.wrapped_key, identity, self.header.run_id) as key:
                self._aead = body_cipher(key, self.header_digest, process)
        else:
            assert recording_key is not None
            self._aead = body_cipher(recording_key, self.header_digest, process)
        self._listing = listing
        self._segments = segment_names(listing, process)
        if process and not self._segments:
            raise UsageError(f"the recording at {source.location} has no process {process}")
        self.status = RecordingStatus(alarms=list(listing.alarms))
        self._started = False

    @property
    def run_id(self) -> str:
        return self.header.run_id

    def __iter__(self) -> Iterator[bytes]:
        """Verified plaintext chunks, each a new bytes object the caller may keep."""
        for chunk in self._verified(None):
            assert isinstance(chunk, bytes)
            yield chunk

    def copy_to(self, write: Callable[[memoryview], Any]) -> RecordingStatus:
        """Stream verified plaintext to write() through one reused buffer (no per-chunk
        allocation). write() must consume the view before returning."""
        buffer = bytearray(self.header.chunk_size)
        for view in self._verified(buffer):
            assert isinstance(view, memoryview)
            write(view)
        return self.status

    def _verified(self, buffer: bytearray | None) -> Iterator[bytes | memoryview]:
        if self._started:
            raise RuntimeError("a SealedReader can be read once")
        self._started = True
        status, digest, aead = self.status, self.header_digest, self._aead
        process = self.process
        out = memoryview(buffer) if buffer is not None else None
        nonce, aad = bytearray(NONCE.size), bytearray(AAD.size)
        last = len(self._segments) - 1
        for index, name in enumerate(self._segments):
            data = memoryview(
                read_segment(self.source, self._listing, index, self.header, self.process)
            )
            # Walk the whole segment before decrypting any of it, so a structural fault
            # anywhere in it (a cut, trailing bytes) is refused before its plaintext leaves.
            # The walk runs again to decrypt rather than keep its records: a segment of empty
            # chunks (21 bytes each) would cost five times its size in record objects.
            first, records, final = status.chunks, 0, False
            for record in iter_chunk_records(data, index, self.header, digest, first, process):
                records += 1
                final = final or bool(record.flags & FLAG_FINAL)
            if index < last and final:
                raise TamperedError(f"{segment_name(index + 1, process)} follows the final chunk")
            for offset, length, flags in iter_chunk_records(
                data, index, self.header, digest, first, process
            ):
                NONCE.pack_into(nonce, 0, status.chunks, flags & FLAG_FINAL)
                AAD.pack_into(aad, 0, digest, index, flags)
                ciphertext = data[offset : offset + length]
                plaintext: bytes | memoryview
                try:
                    if out is None:
                        plaintext = aead.decrypt(nonce, ciphertext, aad)
                    else:
                        plaintext = out[: length - TAG_SIZE]
                        aead.decrypt_into(nonce, ciphertext, aad, plaintext)
                except InvalidTag:
                    raise TamperedError(
                        f"chunk {status.chunks} in {name} failed authentication"
                    ) from None
                status.chunks += 1
                status.plaintext_bytes += len(plaintext)
                if flags & FLAG_FINAL:
                    status.complete = True
                yield plaintext
            status.segments += 1
            status.segment_chunks.append(records)

    def read_all(self) -> bytes:
        return b"".join(self)


def process_line(process: str) -> list[str]:
    """The processes a forked one's run goes through: "" (the recorded one), then each
    ancestor, then itself ("1.2" -> ["", "1", "1.2"])."""
    if not valid_process_path(process):
        raise UsageError(f'{process!r} is not a process path ("1", "1.2", ...)')
    parts = process.split(".") if process else []
    return ["", *(".".join(parts[: n + 1]) for n in range(len(parts)))]


MAX_LINE_RUNS = 10_000  # runs in one rotated line: more is a loop or a forgery, not a worker


def previous_runs(
    source: RecordingSource, key: Secret, listing: Listing | None = None
) -> list[tuple[RecordingSource, Continuation]]:
    """The runs a rotated-to run goes on from, the earliest first: each one's store (beside
    this one's: the store's `beside`) and what its successor's `continues` object says of it
    (its run, process, header digest and key: a Secret the caller wipes). [] for a run that
    is no continuation. TamperedError if a `continues` object does not open under its run's
    key, or names a run whose header is not the one it names; UsageError if the store cannot
    reach the run before (a store with no `beside`, or nothing there)."""
    found: list[tuple[RecordingSource, Continuation]] = []
    here, here_key, seen = source, key, {source.location}
    listing = listing if listing is not None else source.list()
    try:
        while CONTINUES_OBJECT in listing.objects:
            _, digest = read_header(here, listing)
            raw = _read_capped(here, listing, CONTINUES_OBJECT, MAX_CONTINUES_BYTES,
                               "the continues object is too large")  # fmt: skip
            before = open_continuation(raw, here_key, digest)
            beside = getattr(here, "beside", None)
            if beside is None:
                before.key.wipe()
                raise UsageError(
                    f"the run at {here.location} goes on from run {before.run_id}, which a "
                    "store of this kind cannot reach"
                )
            there = beside(before.location)
            found.append((there, before))
            if there.location in seen or len(found) > MAX_LINE_RUNS:
                raise TamperedError(f"the runs before {source.location} go round in a loop")
            seen.add(there.location)
            listing = there.list()
            header, digest = read_header(there, listing)
            if header.run_id != before.run_id or digest != before.header_digest:
                raise TamperedError(
                    f"{there.location} is not the run {before.run_id} that the run after it "
                    "goes on from (another header)"
                )
            here, here_key = there, before.key
    except BaseException:
        for _, before in found:
            before.key.wipe()
        raise
    found.reverse()
    return found


def read_process(
    source: RecordingSource,
    identity: Identity | None,
    *,
    recording_key: Secret | None = None,
    expected_run_id: str | None = None,
    process: str = "",
) -> tuple[bytes, RecordingStatus]:
    """The event stream of one process's run, verified: the recorded process's stream, or a
    forked one's as it ran (its ancestors' streams cut where each forked, then its own:
    chain_streams), with the status of its own stream (an ancestor's needs to reach its
    fork only, which parsing the chain checks). A run the recorder rotated to is read after
    the runs it goes on from (previous_runs), each as far as the next goes on."""
    from ._stream import chain_streams  # (the recorder never loads the stream's parser)

    listing = source.list()
    line: list[tuple[RecordingSource, Secret | None, str]] = []
    if CONTINUES_OBJECT in listing.objects:
        key = recording_key
        if key is None:
            header, _ = read_header(source, listing)
            assert identity is not None
            key = unwrap_recording_key(header.wrapped_key, identity, header.run_id)
        try:
            line = [(there, before.key, before.process)
                    for there, before in previous_runs(source, key, listing)]  # fmt: skip
        finally:
            if key is not recording_key:
                key.wipe()
    streams: list[bytes] = []
    status = RecordingStatus()
    try:
        for there, key, path in line:
            for step in process_line(path):
                streams.append(SealedReader(there, None, recording_key=key,
                                            process=step).read_all())  # fmt: skip
        for path in process_line(process):
            reader = SealedReader(source, identity, expected_run_id=expected_run_id,
                                  recording_key=recording_key, process=path)  # fmt: skip
            streams.append(reader.read_all())
            status = reader.status
    finally:
        for _, key, _ in line:
            assert key is not None
            key.wipe()
    return (chain_streams(streams) if len(streams) > 1 else streams[0]), status
