"""Where sealed recordings live: the store protocol, a local directory, memory, and the resolver.

A store holds the objects of ONE recording under a location (a directory, or an S3 prefix).
Objects are written once and never replaced or deleted by sealtrace. Reading takes the OLDEST
version of every object: a later version can only come from a compromised or confused writer,
so it is reported as an alarm and never read. The S3 store lives in `_s3` and is imported only
when an s3:// location is used, so importing the recorder never imports boto3.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ._errors import StorageError, UsageError
from ._format import CONTINUES_OBJECT, HEADER_OBJECT, segment_process

if TYPE_CHECKING:
    from ._s3 import S3Options, S3Store

# collections.abc.Buffer arrives in 3.12; these are the buffers sealtrace hands to stores.
BytesLike = bytes | bytearray | memoryview

__all__ = [
    "BytesLike",
    "Listing",
    "LocalDirStore",
    "MemoryStore",
    "RecordingSink",
    "RecordingSource",
    "StoredObject",
    "open_store",
]


@dataclass(frozen=True)
class StoredObject:
    name: str
    size: int  # of the oldest version
    versions: int = 1
    version_id: str | None = None  # of the oldest version, where the store has versions


@dataclass
class Listing:
    objects: dict[str, StoredObject] = field(default_factory=dict)
    alarms: list[str] = field(default_factory=list)


@runtime_checkable
class RecordingSink(Protocol):
    """Write side. `put` creates an immutable object and must not keep a reference to data."""

    location: str

    def put(self, name: str, data: BytesLike) -> None: ...


@runtime_checkable
class RecordingSource(Protocol):
    """Read side: the oldest version of each object, plus alarms about anything else seen."""

    location: str

    def list(self) -> Listing: ...

    def get(self, name: str, limit: int | None = None) -> bytes:
        """The object's bytes; with a limit, at most limit + 1 of them (so a caller can tell an
        object past its limit without ever holding more than that)."""
        ...


def is_recording_object(name: str) -> bool:
    """The header, a continuation's `continues`, or a segment of the recorded process's or a
    forked process's stream."""
    return name in (HEADER_OBJECT, CONTINUES_OBJECT) or segment_process(name) is not None


class LocalDirStore:
    """A directory holding one recording, with the same object names as S3.

    Objects are created with O_EXCL-style semantics (written to a temporary name, fsynced,
    hard-linked into place, made read-only), so a crash never leaves a half-written object
    under a recording name and an existing object is never replaced.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.location = str(path)

    @property
    def name(self) -> str:
        """The directory's own name: the run's location as a continuation names it."""
        return self.path.name

    def beside(self, name: str) -> LocalDirStore:
        """The directory `name` next to this one: where a rotated run's next or previous
        run is."""
        return LocalDirStore(self.path.parent / name)

    def put(self, name: str, data: BytesLike) -> None:
        if not is_recording_object(name):
            raise ValueError(f"not a recording object name: {name!r}")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            tmp = self.path / f".{name}.partial-{os.getpid()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data).cast("B")
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, self.path / name)
            except FileExistsError:
                raise StorageError(
                    f"{self.path / name} already exists; recording objects are written once"
                ) from None
            finally:
                tmp.unlink()
            os.chmod(self.path / name, 0o444)
            dir_fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StorageError(f"cannot write {name} to {self.path}: {exc.strerror}") from None

    def list(self) -> Listing:
        listing = Listing()
        try:
            entries = sorted(os.scandir(self.path), key=lambda e: e.name)
        except FileNotFoundError:
            return listing
        except OSError as exc:
            raise StorageError(f"cannot list {self.path}: {exc.strerror}") from None
        for entry in entries:
            if is_recording_object(entry.name) and entry.is_file(follow_symlinks=False):
                listing.objects[entry.name] = StoredObject(entry.name, entry.stat().st_size)
            elif entry.name.startswith(".") and ".partial-" in entry.name:
                listing.alarms.append(f"unfinished write left behind: {entry.name}")
            else:
                listing.alarms.append(f"unexpected object in the recording: {entry.name}")
        return listing

    def get(self, name: str, limit: int | None = None) -> bytes:
        try:
            with open(self.path / name, "rb") as file:
                return file.read() if limit is None else file.read(limit + 1)
        except OSError as exc:
            raise StorageError(f"cannot read {self.path / name}: {exc.strerror}") from None


class MemoryStore:
    """An in-process store: for embedding, for the agent's decrypt-in-memory path, for benches.

    Keeps every version put under a name, oldest first, like a versioned bucket, so the
    oldest-version rule and its alarm behave the same here.
    """

    def __init__(self, location: str = "memory:") -> None:
        self.location = location
        self.versions: dict[str, list[bytes]] = {}

    def put(self, name: str, data: BytesLike) -> None:
        if not is_recording_object(name):
            raise ValueError(f"not a recording object name: {name!r}")
        self.versions.setdefault(name, []).append(bytes(data))

    def list(self) -> Listing:
        listing = Listing()
        for name in sorted(self.versions):
            history = self.versions[name]
            listing.objects[name] = StoredObject(name, len(history[0]), versions=len(history))
            if len(history) > 1:
                listing.alarms.append(
                    f"{name} has {len(history) - 1} later version(s); only the oldest is read"
                )
        return listing

    def get(self, name: str, limit: int | None = None) -> bytes:
        try:
            data = self.versions[name][0]
        except KeyError:
            raise StorageError(f"no object {name} in {self.location}") from None
        return data if limit is None else data[: limit + 1]


class DiscardSink:
    """Counts what it is given and keeps nothing: measures sealing without storage cost."""

    location = "discard:"

    def __init__(self) -> None:
        self.objects = 0
        self.bytes = 0

    def put(self, name: str, data: BytesLike) -> None:
        self.objects += 1
        self.bytes += memoryview(data).nbytes


def open_store(location: str, *, s3: S3Options | None = None) -> LocalDirStore | S3Store:
    """A store for a local path or an s3://bucket/prefix location."""
    if location.startswith("s3://"):
        try:
            from ._s3 import S3Options as _Options
            from ._s3 import S3Store as _Store
        except ImportError as exc:  # boto3 is an extra
            raise UsageError(
                f"s3:// locations need boto3 ({exc.name} is missing): pip install 'sealtrace[s3]'"
            ) from None
        return _Store.from_url(location, s3 or _Options.from_env())
    if "://" in location:
        raise UsageError(f"unsupported location {location!r}: use a path or s3://bucket/prefix")
    return LocalDirStore(Path(location))
