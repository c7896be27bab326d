"""The S3 store: write-once objects under Object Lock COMPLIANCE retention, oldest-version reads.

Imported only for s3:// locations. boto3 honours AWS_ENDPOINT_URL itself, which is how the
local moto server stands in for AWS. Production writers need PutObject (with retention) and
GetObjectLockConfiguration; readers need ListBucketVersions and GetObjectVersion.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from ._errors import StorageError, UsageError
from ._store import BytesLike, Listing, StoredObject, is_recording_object

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

__all__ = ["S3Options", "S3Store"]

DEFAULT_RETENTION_DAYS = 30


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class S3Options:
    retention_days: int = DEFAULT_RETENTION_DAYS
    # Development only: accept a bucket without Object Lock (objects then carry no retention).
    allow_unlocked_bucket: bool = False

    @classmethod
    def from_env(cls) -> S3Options:
        raw = os.environ.get("SEALTRACE_S3_RETENTION_DAYS", str(DEFAULT_RETENTION_DAYS))
        try:
            days = int(raw)
        except ValueError:
            raise UsageError(
                f"SEALTRACE_S3_RETENTION_DAYS must be an integer, not {raw!r}"
            ) from None
        return cls(days, _env_flag("SEALTRACE_S3_ALLOW_UNLOCKED_BUCKET"))

    def __post_init__(self) -> None:
        if not 1 <= self.retention_days <= 36500:
            raise UsageError("retention days must be between 1 and 36500")


def _describe(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return f"{err.get('Code', 'error')}: {err.get('Message', '')}".strip()
    return exc.__class__.__name__


class S3Store:
    def __init__(self, bucket: str, prefix: str, options: S3Options, client: Any = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.options = options
        self.location = f"s3://{bucket}/{self.prefix}"
        self._client: S3Client = client or boto3.client("s3")
        self._lock_checked = False
        self._locked = False
        self._listed: dict[str, StoredObject] | None = None

    def for_forked_process(self) -> S3Store:
        """The same location with a client of its own, for a process the recorder forked:
        the inherited client's connections are the parent's."""
        return S3Store(self.bucket, self.prefix, self.options)

    @property
    def name(self) -> str:
        """The last part of the prefix: the run's location as a continuation names it."""
        return self.prefix.rstrip("/").rpartition("/")[2]

    def beside(self, name: str) -> S3Store:
        """The location `name` next to this one (same bucket, the prefix's last part
        replaced), with a client of its own: where a rotated run's next or previous run is."""
        parent = self.prefix.rstrip("/").rpartition("/")[0]
        return S3Store(self.bucket, f"{parent}/{name}" if parent else name, self.options)

    @classmethod
    def from_url(cls, url: str, options: S3Options) -> S3Store:
        rest = url[len("s3://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise UsageError(f"no bucket in {url!r}: use s3://bucket/prefix")
        return cls(bucket, prefix, options)

    def _key(self, name: str) -> str:
        return self.prefix + name

    def check_object_lock(self) -> bool:
        """True if the bucket enforces Object Lock; refuses an unlocked bucket unless allowed."""
        try:
            conf = self._client.get_object_lock_configuration(Bucket=self.bucket)
            enabled = conf.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled"
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in {
                "ObjectLockConfigurationNotFoundError",
                "ObjectLockConfigurationNotFound",
            }:
                raise StorageError(
                    f"cannot read the lock of bucket {self.bucket}: {_describe(exc)}"
                ) from None
            enabled = False
        except BotoCoreError as exc:
            raise StorageError(
                f"cannot reach S3 for bucket {self.bucket}: {_describe(exc)}"
            ) from None
        if not enabled and not self.options.allow_unlocked_bucket:
            raise UsageError(
                f"bucket {self.bucket} has no Object Lock; recordings must be immutable "
                "(for development only, set SEALTRACE_S3_ALLOW_UNLOCKED_BUCKET=1)"
            )
        return enabled

    def put(self, name: str, data: BytesLike) -> None:
        if not is_recording_object(name):
            raise ValueError(f"not a recording object name: {name!r}")
        if not self._lock_checked:
            self._locked = self.check_object_lock()
            self._lock_checked = True
        extra: dict[str, Any] = {}
        if self._locked:
            until = dt.datetime.now(dt.UTC) + dt.timedelta(days=self.options.retention_days)
            extra = {"ObjectLockMode": "COMPLIANCE", "ObjectLockRetainUntilDate": until}
        try:
            self._client.put_object(
                Bucket=self.bucket,
                Key=self._key(name),
                Body=bytes(data),
                ChecksumAlgorithm="SHA256",
                **extra,
            )
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(
                f"cannot write {self._key(name)} to {self.bucket}: {_describe(exc)}"
            ) from None

    def list(self) -> Listing:
        listing = Listing()
        versions: dict[str, list[dict[str, Any]]] = {}
        markers: dict[str, int] = {}
        try:
            pages = self._client.get_paginator("list_object_versions").paginate(
                Bucket=self.bucket, Prefix=self.prefix
            )
            for page in pages:
                for version in page.get("Versions", []):
                    versions.setdefault(version["Key"], []).append(dict(version))
                for marker in page.get("DeleteMarkers", []):
                    markers[marker["Key"]] = markers.get(marker["Key"], 0) + 1
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"cannot list {self.location}: {_describe(exc)}") from None
        for key in sorted(versions):
            name = key[len(self.prefix) :]
            if not is_recording_object(name):
                listing.alarms.append(f"unexpected object in the recording: {name}")
                continue
            # Oldest first; S3 lists a key's versions newest first, so the stable sort keeps
            # that order reversed for equal timestamps.
            history = sorted(reversed(versions[key]), key=lambda v: v["LastModified"])
            oldest = history[0]
            listing.objects[name] = StoredObject(
                name, int(oldest["Size"]), versions=len(history), version_id=oldest["VersionId"]
            )
            if len(history) > 1:
                listing.alarms.append(
                    f"{name} has {len(history) - 1} later version(s); only the oldest is read"
                )
        for key, count in sorted(markers.items()):
            listing.alarms.append(f"{key[len(self.prefix) :]} has {count} delete marker(s)")
        self._listed = listing.objects
        return listing

    def get(self, name: str, limit: int | None = None) -> bytes:
        """The oldest version of name, as of the last listing (listing first if there was none)."""
        found = (self._listed if self._listed is not None else self.list().objects).get(name)
        if found is None:
            raise StorageError(f"no object {name} in {self.location}")
        try:
            response = self._client.get_object(
                Bucket=self.bucket, Key=self._key(name), VersionId=found.version_id or "null"
            )
            body = response["Body"]
            try:
                return body.read() if limit is None else body.read(limit + 1)
            finally:
                body.close()
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"cannot read {self._key(name)}: {_describe(exc)}") from None
