"""The pipeline thread hashes, seals and stores the event stream; the application's thread only
hands buffers over, and is never made to wait for the store or to see its failures."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sealtrace.proxy import Identity, MemoryStore, SealedReader, SealedWriter, StorageError
from sealtrace.proxy._pipeline import NICE, StreamPipeline
from sealtrace.proxy._runtime import IMPLEMENTATIONS, record_runtime
from sealtrace.proxy._store import BytesLike
from sealtrace.proxy._stream import META, parse_stream, stream_digest, stream_prefix

from ..conftest import KeyFiles


class _HangingStore:
    """A store whose puts never return until released (an unreachable S3 endpoint)."""

    location = "hanging:"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.objects: dict[str, bytes] = {}

    def put(self, name: str, data: BytesLike) -> None:
        self.release.wait()
        self.objects[name] = bytes(data)


class _FailingStore(MemoryStore):
    """Stores the header, then fails every segment (a full disk)."""

    def put(self, name: str, data: BytesLike) -> None:
        if name != "header":
            raise StorageError(f"cannot write {name}: No space left on device")
        super().put(name, data)


def _pipeline(store: Any, keys: KeyFiles, **options: Any) -> StreamPipeline:
    pipeline = StreamPipeline(store, **options)
    pipeline.attach(SealedWriter(pipeline, keys.recipient, "run-p", segment_size=64 * 1024))
    return pipeline


def _open(store: MemoryStore, identity: Identity) -> bytes:
    return SealedReader(store, identity, expected_run_id="run-p").read_all()


def test_records_are_hashed_sealed_and_stored_in_order(keys: KeyFiles) -> None:
    store = MemoryStore()
    pipeline = _pipeline(store, keys)
    parts = [bytes([i]) * (1000 + 37 * i) for i in range(200)]
    prefix = stream_prefix()
    pipeline.send(bytearray(prefix + parts[0]), len(prefix))
    for part in parts[1:]:
        pipeline.send(bytearray(part), flush=part[0] % 50 == 0)
    expected = stream_digest()
    expected.update(b"".join(parts))
    pipeline.end(lambda digest: b"END" + digest)
    assert pipeline.close(10) is None
    assert _open(store, keys.identity) == prefix + b"".join(parts) + b"END" + expected.digest()


class _PriorityStore(MemoryStore):
    """Notes the nice value of the thread that stores each object."""

    def __init__(self) -> None:
        super().__init__()
        self.nice: list[int] = []

    def put(self, name: str, data: BytesLike) -> None:
        self.nice.append(os.getpriority(os.PRIO_PROCESS, 0))  # the calling thread's, on Linux
        super().put(name, data)


def test_the_thread_gives_the_cpu_to_the_application(keys: KeyFiles) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    store = _PriorityStore()
    pipeline = _pipeline(store, keys)
    prefix = stream_prefix()
    pipeline.send(bytearray(prefix + bytes(200_000)), len(prefix), flush=True)
    pipeline.end(lambda digest: b"END" + digest)
    assert pipeline.close(10) is None
    lowered = min(own + NICE, 19)
    assert pipeline.nice == lowered > own
    assert len(store.nice) >= 3 and set(store.nice) == {lowered}  # header, segments, end
    assert os.getpriority(os.PRIO_PROCESS, 0) == own  # the application's thread keeps its own
    assert _open(store, keys.identity).startswith(prefix + bytes(200_000))


def test_a_store_that_hangs_never_blocks_the_application(keys: KeyFiles) -> None:
    store = _HangingStore()
    pipeline = _pipeline(store, keys, max_pending=256 * 1024)
    start = time.monotonic()
    for _ in range(4):  # the header is queued too: 4 buffers fill the allowance
        pipeline.send(bytearray(60 * 1024))
    with pytest.raises(OSError, match="more than 262144 bytes behind"):
        pipeline.send(bytearray(64 * 1024))
    assert time.monotonic() - start < 5
    assert "did not finish" in (pipeline.close(0.2) or "")
    store.release.set()


def test_a_failing_store_is_reported_to_the_next_hand_over(keys: KeyFiles) -> None:
    pipeline = _pipeline(_FailingStore(), keys)
    pipeline.send(bytearray(200 * 1024))  # more than a segment: the store is asked, and fails
    deadline = time.monotonic() + 10
    while pipeline.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(OSError, match="No space left on device"):
        pipeline.send(bytearray(10))
    assert "No space left on device" in (pipeline.close(10) or "")


def test_an_aborted_stream_opens_as_incomplete(keys: KeyFiles) -> None:
    store = MemoryStore()
    pipeline = _pipeline(store, keys)
    pipeline.send(bytearray(b"x" * 5000))
    pipeline.abort()
    assert pipeline.close(10) is None
    reader = SealedReader(store, keys.identity, expected_run_id="run-p")
    assert reader.read_all() == b"x" * 5000
    assert not reader.status.complete


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_runtime_reports_a_store_failure_once_and_lets_calls_through(
    keys: KeyFiles, tmp_path: Path, implementation: str
) -> None:
    reports: list[str] = []
    pipeline = _pipeline(_FailingStore(), keys)
    rt = record_runtime(pipeline, report=reports.append, implementation=implementation)
    rt.record_value(META, {"run_id": "run-p"})
    results = [rt.call("os.urandom", (4096,), lambda: b"r" * 4096) for _ in range(400)]
    deadline = time.monotonic() + 10
    while rt.active and time.monotonic() < deadline:
        rt.call("os.urandom", (4096,), lambda: b"r" * 4096)
    assert results == [b"r" * 4096] * 400
    assert not rt.active and rt.outcome is not None and rt.outcome.startswith("failed")
    assert len(reports) == 1 and "No space left on device" in reports[0]
    assert rt.call("time.time", None, lambda: 1.5) == 1.5  # straight through from now on
    assert len(reports) == 1
    pipeline.close(10)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_stream_the_runtime_makes_parses_and_its_digest_matches(
    keys: KeyFiles, implementation: str
) -> None:
    store = MemoryStore()
    pipeline = _pipeline(store, keys)
    rt = record_runtime(pipeline, implementation=implementation)
    rt.record_value(META, {"run_id": "run-p"})
    for i in range(5000):
        rt.call("socket.recv", (3, 65536, 0), lambda i=i: bytes([i % 256]) * (i % 300))
    rt.finish(0)
    assert pipeline.close(10) is None and rt.outcome == "complete"
    parsed = parse_stream(_open(store, keys.identity))  # checks the EXIT digest
    assert parsed.exit is not None and parsed.exit["events"] == 5000
    assert [parsed.decode(e) for e in parsed.events[:3]] == [b"", b"\x01", b"\x02\x02"]
