"""What can be said about a stored recording without (or with) its identity."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

from ._errors import IntegrityError
from ._format import (
    CONTINUES_OBJECT,
    FLAG_FINAL,
    HEADER_OBJECT,
    RecordingHeader,
    segment_name,
    unwrap_recording_key,
)
from ._keys import Identity
from ._reader import (
    SealedReader,
    iter_chunk_records,
    previous_runs,
    process_paths,
    read_header,
    read_segment,
    segment_names,
)
from ._store import Listing, RecordingSource

__all__ = ["SegmentReport", "describe_recording"]


@dataclass
class SegmentReport:
    name: str
    size: int
    versions: int
    chunks: int | None = None
    first_chunk: int | None = None
    has_final: bool = False
    problem: str | None = None


@dataclass
class RecordingReport:
    location: str
    run_id: str
    format_version: int
    suite: str
    chunk_size: int
    segment_size: int
    created: str
    header_digest: str
    header_versions: int
    segments: list[SegmentReport] = field(default_factory=list)
    # Without an identity: what the unauthenticated framing claims. With one: verified.
    completeness: str = "unknown"
    verified: bool = False
    alarms: list[str] = field(default_factory=list)
    # The processes the recorded one forked, each with its own stream: path -> completeness
    # (claimed without an identity, verified with one; "damaged: ..." if it is not whole).
    processes: dict[str, str] = field(default_factory=dict)
    # A run the recorder rotated to: the run it goes on from ("sealed" without an identity:
    # which run it is, the continuation's `continues` object says to the key's holder only).
    continues: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_recording(
    source: RecordingSource, identity: Identity | None = None
) -> RecordingReport:
    """Header, segments and completeness. Structural problems are reported, not raised; with an
    identity every chunk is authenticated and an IntegrityError propagates."""
    listing = source.list()
    header, digest = read_header(source, listing)
    report = RecordingReport(
        location=source.location,
        run_id=header.run_id,
        format_version=header.version,
        suite="DHKEM(X25519, HKDF-SHA256) / HKDF-SHA256 / AES-256-GCM",
        chunk_size=header.chunk_size,
        segment_size=header.segment_size,
        created=dt.datetime.fromtimestamp(header.created_unix_ms / 1000, dt.UTC).isoformat(),
        header_digest=digest.hex(),
        header_versions=listing.objects[HEADER_OBJECT].versions,
        alarms=list(listing.alarms),
    )
    for path in process_paths(listing):
        report.processes[path] = _process_status(source, listing, header, digest, path, identity)
    if CONTINUES_OBJECT in listing.objects:
        report.continues = _continues(source, listing, header, identity)
    if identity is not None:
        return _verified_report(report, source, identity, listing)
    claims_final = False
    try:
        names = segment_names(listing)
    except IntegrityError as exc:
        names = sorted(n for n in listing.objects if n not in (HEADER_OBJECT, CONTINUES_OBJECT))
        report.alarms.append(str(exc))
    for index, name in enumerate(names):
        obj = listing.objects[name]
        seg = SegmentReport(name=name, size=obj.size, versions=obj.versions)
        report.segments.append(seg)
        if name != segment_name(index):
            seg.problem = "out of sequence"
            continue
        chunks, has_final = 0, False
        try:
            data = read_segment(source, listing, index, header)
            # Counted, not kept: a segment of empty chunks holds millions of them.
            for record in iter_chunk_records(data, index, header, digest, None):
                chunks += 1
                has_final = has_final or bool(record.flags & FLAG_FINAL)
        except IntegrityError as exc:
            seg.problem = str(exc)
            continue
        seg.chunks, seg.has_final = chunks, has_final
        claims_final = claims_final or seg.has_final
    problems = any(s.problem for s in report.segments)
    report.completeness = (
        "damaged (see segments)"
        if problems
        else "claims complete (unverified: no identity given)"
        if claims_final
        else "incomplete (no final chunk)"
    )
    return report


def _continues(
    source: RecordingSource, listing: Listing, header: RecordingHeader, identity: Identity | None
) -> str:
    """The run a rotated-to run goes on from, and the line before it (with an identity)."""
    if identity is None:
        return "a run before it (a rotated run; which one, its identity tells)"
    with unwrap_recording_key(header.wrapped_key, identity, header.run_id) as key:
        line = previous_runs(source, key, listing)
    for _, before in line:
        before.key.wipe()
    there, last = line[-1]
    process = f", its process {last.process}" if last.process else ""
    return (f"run {last.run_id} at {there.location}{process}; the line holds "
            f"{len(line)} run{'s' if len(line) > 1 else ''} before this one")  # fmt: skip


def _process_status(
    source: RecordingSource,
    listing: Listing,
    header: RecordingHeader,
    digest: bytes,
    path: str,
    identity: Identity | None,
) -> str:
    """How complete a forked process's stream is: authenticated with an identity, else what
    its framing claims."""
    try:
        if identity is not None:
            return SealedReader(source, identity, process=path).copy_to(lambda _v: None).describe()
        final = False
        for index, _name in enumerate(segment_names(listing, path)):
            data = read_segment(source, listing, index, header, path)
            for record in iter_chunk_records(data, index, header, digest, None, path):
                final = final or bool(record.flags & FLAG_FINAL)
    except IntegrityError as exc:
        return f"damaged: {exc}"
    return "claims complete (unverified)" if final else "incomplete (no final chunk)"


def _verified_report(
    report: RecordingReport, source: RecordingSource, identity: Identity, listing: Listing
) -> RecordingReport:
    """Authenticate every chunk in one pass; the reader's own structural walk supplies the
    per-segment figures, so each segment is fetched once."""
    reader = SealedReader(source, identity)
    status = reader.copy_to(lambda _view: None)
    last = len(status.segment_chunks) - 1
    for index, chunks in enumerate(status.segment_chunks):
        obj = listing.objects[segment_name(index)]
        report.segments.append(
            SegmentReport(
                name=obj.name,
                size=obj.size,
                versions=obj.versions,
                chunks=chunks,
                has_final=status.complete and index == last,
            )
        )
    report.verified = True
    report.completeness = status.describe()
    return report
