"""The S3 store against a real moto server on loopback."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sealtrace.proxy import S3Options, S3Store, SealedReader, SealedWriter, UsageError

from ..conftest import KeyFiles, run_cli, seal_cli

pytestmark = pytest.mark.integration

DATA = bytes(range(256)) * 700  # ~175 KiB, several segments at the sizes below
SIZES = ["--chunk-size", "4096", "--segment-size", "40000"]


def _seal_cli(keys: KeyFiles, url: str, env: dict[str, str], run_id: str = "run-s3") -> None:
    seal_cli(keys, url, DATA, *SIZES, run_id=run_id, env=env)


def test_every_object_carries_compliance_retention(
    keys: KeyFiles, locked_bucket: str, s3_client: Any, aws_env: dict[str, str]
) -> None:
    env = {**aws_env, "SEALTRACE_S3_RETENTION_DAYS": "7"}
    _seal_cli(keys, f"s3://{locked_bucket}/tenant-a/run-s3", env)
    keys_listed = [o["Key"] for o in s3_client.list_objects_v2(Bucket=locked_bucket)["Contents"]]
    assert "tenant-a/run-s3/header" in keys_listed and len(keys_listed) >= 5
    now = dt.datetime.now(dt.UTC)
    for key in keys_listed:
        head = s3_client.head_object(Bucket=locked_bucket, Key=key)
        assert head["ObjectLockMode"] == "COMPLIANCE"
        retain = head["ObjectLockRetainUntilDate"]
        assert dt.timedelta(days=6, hours=23) < retain - now <= dt.timedelta(days=7, minutes=5)

    opened = run_cli(
        "open",
        "--identity",
        str(keys.identity_path),
        f"s3://{locked_bucket}/tenant-a/run-s3",
        env=env,
    )
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout == DATA


def test_deleting_a_version_is_refused(
    keys: KeyFiles, locked_bucket: str, s3_client: Any, aws_env: dict[str, str]
) -> None:
    _seal_cli(keys, f"s3://{locked_bucket}/run-s3", aws_env)
    head = s3_client.head_object(Bucket=locked_bucket, Key="run-s3/seg-000001")
    with pytest.raises(ClientError) as refused:
        s3_client.delete_object(
            Bucket=locked_bucket, Key="run-s3/seg-000001", VersionId=head["VersionId"]
        )
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert (
        s3_client.head_object(Bucket=locked_bucket, Key="run-s3/seg-000001")["VersionId"]
        == head["VersionId"]
    )


def test_a_second_version_raises_an_alarm_and_is_ignored(
    keys: KeyFiles,
    other_keys: KeyFiles,
    locked_bucket: str,
    s3_client: Any,
    aws_env: dict[str, str],
) -> None:
    url = f"s3://{locked_bucket}/run-s3"
    _seal_cli(keys, url, aws_env)
    # A compromised writer uploads its own segment (from another recording) and some junk.
    _seal_cli(other_keys, f"s3://{locked_bucket}/evil", aws_env)
    evil = s3_client.get_object(Bucket=locked_bucket, Key="evil/seg-000001")["Body"].read()
    s3_client.put_object(Bucket=locked_bucket, Key="run-s3/seg-000001", Body=evil)
    s3_client.put_object(Bucket=locked_bucket, Key="run-s3/header", Body=b"junk")

    opened = run_cli("open", "--identity", str(keys.identity_path), url, env=aws_env)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout == DATA
    assert b"alarm: seg-000001 has 1 later version(s)" in opened.stderr
    assert b"alarm: header has 1 later version(s)" in opened.stderr

    report = json.loads(run_cli("inspect", "--json", url, env=aws_env).stdout)
    assert report["header_versions"] == 2
    assert [s["versions"] for s in report["segments"]][:2] == [1, 2]
    assert any("seg-000001 has 1 later version" in a for a in report["alarms"])


def test_negative_control_without_the_oldest_rule_the_second_version_would_be_read(
    keys: KeyFiles,
    other_keys: KeyFiles,
    locked_bucket: str,
    s3_client: Any,
    aws_env: dict[str, str],
) -> None:
    _seal_cli(keys, f"s3://{locked_bucket}/run-s3", aws_env)
    s3_client.put_object(Bucket=locked_bucket, Key="run-s3/seg-000001", Body=b"junk")
    latest = s3_client.get_object(Bucket=locked_bucket, Key="run-s3/seg-000001")["Body"].read()
    assert latest == b"junk"  # what a naive reader (no VersionId) would have decrypted


def test_a_bucket_without_object_lock_is_refused_unless_in_development(
    keys: KeyFiles, unlocked_bucket: str, aws_env: dict[str, str], tmp_path: Path
) -> None:
    url = f"s3://{unlocked_bucket}/run-s3"
    proc = run_cli(
        "seal",
        "--recipient",
        str(keys.recipient_path),
        "--run-id",
        "r",
        "--output",
        url,
        stdin=b"x",
        env=aws_env,
    )
    assert proc.returncode == 2
    assert b"has no Object Lock" in proc.stderr and b"Traceback" not in proc.stderr
    with pytest.raises(UsageError):
        SealedWriter(S3Store.from_url(url, S3Options()), keys.recipient, "r")

    dev = {**aws_env, "SEALTRACE_S3_ALLOW_UNLOCKED_BUCKET": "1"}
    _seal_cli(keys, url, dev)
    reader = SealedReader(S3Store.from_url(url, S3Options()), keys.identity)
    assert reader.read_all() == DATA and reader.status.complete


def test_an_unreachable_endpoint_is_one_clear_error(keys: KeyFiles, tmp_path: Path) -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_MAX_ATTEMPTS": "1",
    }
    proc = run_cli("inspect", "s3://nowhere-bucket/run", env=env)
    assert proc.returncode == 1
    assert proc.stderr.count(b"\n") == 1 and b"cannot list" in proc.stderr
