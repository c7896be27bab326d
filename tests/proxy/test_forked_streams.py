"""A forked process's stream: its names, its own body key, and how it continues its parent's.

The recorder gives each process the program forks a stream of its own in the same recording
(`proc-<path>-seg-NNNNNN`, sealed under a body key derived for its path), which begins with a
FORKED record saying where in its parent's stream it forked. A reader opens one process's
stream; chain_streams and parse_stream put a line of them together and refuse any that does
not continue its parent's where that forked.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sealtrace.proxy import LocalDirStore, SealedReader, SealedWriter, TamperedError, UsageError
from sealtrace.proxy._codec import CodecError, Encoder, _write_varint
from sealtrace.proxy._format import (
    parse_segment_name,
    segment_name,
    segment_process,
    valid_process_path,
)
from sealtrace.proxy._reader import process_paths
from sealtrace.proxy._store import is_recording_object
from sealtrace.proxy._stream import (
    CALL,
    FORKED,
    META,
    NAME,
    chain_streams,
    parse_stream,
    stream_prefix,
)

from ..conftest import KeyFiles


def test_process_paths_and_segment_names() -> None:
    for good in ("", "1", "12", "1.2", "3.1.4", ".".join(["9"] * 16)):
        assert valid_process_path(good), good
    for bad in ("0", "01", "1.", ".1", "1..2", "a", "1.0", "-1", "1 ", ".".join(["9"] * 17)):
        assert not valid_process_path(bad), bad
    assert segment_name(3) == "seg-000003"
    assert segment_name(3, "1.2") == "proc-1.2-seg-000003"
    assert segment_process("seg-000003") == ""
    assert segment_process("proc-1.2-seg-000003") == "1.2"
    for other in ("proc--seg-000001", "proc-0-seg-000001", "proc-1-seg-1", "proc-1.2", "header"):
        assert segment_process(other) is None, other
    assert parse_segment_name("proc-1-seg-000007", "1") == 7
    assert parse_segment_name("proc-1-seg-000007") is None  # not the root's
    assert parse_segment_name("proc-1-seg-000007", "2") is None  # nor another process's
    assert is_recording_object("proc-1.2-seg-000000") and not is_recording_object("proc-x-seg")


def _recording(keys: KeyFiles, where: Path) -> tuple[SealedWriter, LocalDirStore]:
    store = LocalDirStore(where)
    return SealedWriter(store, keys.recipient, "run-forks", chunk_size=64), store


def _in_a_child(make: Callable[[], None]) -> None:
    """make() in a forked child of this process (as the recorder makes a child's stream)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            make()
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def test_each_process_has_its_own_stream_and_body_key(keys: KeyFiles, tmp_path: Path) -> None:
    root, store = _recording(keys, tmp_path / "rec")

    def child() -> None:
        writer = SealedWriter.for_process(root, store, "1")
        writer.write(b"child " * 40)
        _in_a_child(lambda: _write(SealedWriter.for_process(writer, store, "1.1")))
        writer.close()

    _in_a_child(child)
    root.write(b"root " * 40)
    root.close()
    identity = keys.identity
    assert SealedReader(store, identity).read_all() == b"root " * 40
    assert SealedReader(store, identity, process="1").read_all() == b"child " * 40
    assert SealedReader(store, identity, process="1.1").read_all() == b"grandchild " * 40
    assert process_paths(store.list()) == ["1", "1.1"]
    # The same counters under one key would reuse nonces: each process's key is its own, so
    # a segment moved from one process's stream to another's never opens.
    moved = tmp_path / "rec" / "proc-1.1-seg-000000"
    moved.chmod(0o644)
    moved.write_bytes((tmp_path / "rec" / "proc-1-seg-000000").read_bytes())
    with pytest.raises(TamperedError, match="failed authentication"):
        SealedReader(store, identity, process="1.1").read_all()
    with pytest.raises(UsageError, match="has no process 2"):
        SealedReader(store, identity, process="2")
    with pytest.raises(UsageError, match="not a process path"):
        SealedReader(store, identity, process="1.0")


def test_the_forked_writer_wipes_what_it_inherited(keys: KeyFiles, tmp_path: Path) -> None:
    root, store = _recording(keys, tmp_path / "rec")
    child = SealedWriter.for_process(root, store, "1")
    # The child process never writes its parent's stream: the inherited writer is closed
    # and its copy of the recording key wiped.
    with pytest.raises(ValueError, match="closed"):
        root.write(b"x")
    with pytest.raises(ValueError, match="closed"):
        SealedWriter.for_process(root, store, "2")
    child.close()
    with pytest.raises(ValueError, match="not a forked process's path"):
        SealedWriter.for_process(child, store, "")


def _write(writer: SealedWriter) -> None:
    writer.write(b"grandchild " * 40)
    writer.close()


def _record(kind: int, value: object) -> bytes:
    body = bytearray()
    Encoder().encode(body, value)
    out = bytearray((kind,))
    _write_varint(out, len(body))
    return bytes(out + body)


def _parent() -> tuple[bytes, int]:
    """A parent stream and the offset at which it forked (after its first event)."""
    stream = stream_prefix() + _record(META, {"run_id": "r"}) + _record(NAME, "clock")
    stream += _record(CALL, None)[:1] + _call_body(0)
    return stream, len(stream)


def _call_body(callee: int) -> bytes:
    body = bytearray()
    _write_varint(body, callee)
    body += bytes(16) + b"\x00"
    Encoder().encode(body, 1.5)
    out = bytearray()
    _write_varint(out, len(body))
    return bytes(out + body)


def _child(offset: int, *, path: str = "1", parent: str = "", events: int = 1) -> bytes:
    forked = {"path": path, "parent": parent, "offset": offset, "events": events}
    return stream_prefix() + _record(FORKED, forked) + bytes((CALL,)) + _call_body(0)


def test_a_chain_continues_the_parent_where_it_forked() -> None:
    parent, offset = _parent()
    after_fork = parent + bytes((CALL,)) + _call_body(0)  # the parent's own later event
    parsed = parse_stream(chain_streams([after_fork, _child(offset)]))
    # The child's event continues the parent's numbering and its callee names.
    assert [e.callee for e in parsed.events] == ["clock", "clock"]
    assert parsed.process == "1" and parsed.switches == {1: "1"}


@pytest.mark.parametrize(
    "change",
    [
        {"offset": -1},  # cut one byte early
        {"events": 0},  # forked at another event
        {"parent": "2"},  # claims another parent
        {"path": "2.1"},  # not a child of the root
        {"path": "1.1"},  # a grandchild directly under the root
    ],
)
def test_a_chain_that_does_not_continue_is_refused(change: dict[str, object]) -> None:
    parent, offset = _parent()
    fields: dict[str, object] = {"path": "1", "parent": "", "offset": offset, "events": 1}
    if "offset" in change:
        fields["offset"] = offset + int(change["offset"])  # type: ignore[call-overload]
    else:
        fields.update(change)
    child = stream_prefix() + _record(FORKED, fields) + bytes((CALL,)) + _call_body(0)
    with pytest.raises(CodecError):
        parse_stream(chain_streams([parent, child]))


def test_a_child_stream_needs_its_forked_record_and_a_parent_long_enough() -> None:
    parent, offset = _parent()
    with pytest.raises(CodecError, match="FORKED"):
        chain_streams([parent, stream_prefix() + _record(META, {})])
    with pytest.raises(CodecError, match="ends before the fork"):
        chain_streams([parent[: offset - 3], _child(offset)])
    # A FORKED record anywhere but at a forked stream's start is malformed.
    with pytest.raises(CodecError, match="does not begin a chained stream"):
        parse_stream(parent + _record(FORKED, {"path": "1"}))
