"""The runner → agent frame protocol: layout, and the agent's checks, one violation each."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealtrace.sandbox.protocol import (
    FRAME_SIZE,
    NO_SOURCE,
    PROTOCOL_VERSION,
    DivergenceFlags,
    ErrorCode,
    Frame,
    FrameError,
    FrameReader,
    Op,
    Origin,
    ReplayStatus,
    TypeTag,
    decode,
    encode,
    numbered,
)

SOURCES = 3


def _wire(*frames: Frame) -> bytes:
    return b"".join(encode(fr) for fr in numbered(list(frames)))


HELLO = Frame(Op.HELLO, a=0x030B07F0, d=FRAME_SIZE)
LOADED = Frame(Op.LOADED, a=1000, b=990, ival=0, d=SOURCES)


def _loaded_reader(budget: int = 100) -> FrameReader:
    reader = FrameReader(SOURCES, budget=budget)
    reader.ask(Op.LOAD, 1)
    frames = reader.feed(_wire(HELLO, LOADED, Frame(Op.DONE, a=1, b=1)))
    assert [f.op for f in frames] == [Op.HELLO, Op.LOADED, Op.DONE]
    return reader


def _then(reader: FrameReader, *frames: Frame) -> list[Frame]:
    start = reader.seq + 1
    return reader.feed(b"".join(encode(fr) for fr in numbered(list(frames), start)))


def test_every_frame_is_the_same_size_and_round_trips() -> None:
    for op in Op:
        frame = Frame(op, seq=7, a=2**64 - 1, b=5, c=NO_SOURCE, d=9, e=3, f=4,
                      ival=-(2**63), fval=0.1, digest=bytes(range(32)))  # fmt: skip
        raw = encode(frame)
        assert len(raw) == FRAME_SIZE
        assert decode(raw) == frame


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (encode(HELLO)[:-1], "a frame is 88 bytes"),
        (encode(HELLO) + b"\0", "a frame is 88 bytes"),
        (b"\0\0" + encode(HELLO)[2:], "bad magic"),
        (encode(HELLO)[:2] + bytes([PROTOCOL_VERSION + 1]) + encode(HELLO)[3:], "version"),
        (encode(HELLO)[:3] + bytes([200]) + encode(HELLO)[4:], "unknown opcode"),
    ],
)
def test_decode_refuses_what_is_not_a_frame(raw: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode(raw)


def test_a_whole_session_is_accepted() -> None:
    reader = _loaded_reader()
    reader.ask(Op.TRACE, 2)
    answer = _then(
        reader,
        Frame(Op.FRAME_AT, a=900, c=0, d=4),
        Frame(Op.NODE, a=880, b=2**64 - 1, c=1, d=19, e=122 << 16, f=Origin.NONE),
        Frame(Op.VALUE, a=880, e=TypeTag.FLOAT, fval=0.0),
        Frame(Op.EDGE, a=880, b=870),
        Frame(Op.NODE, a=870, b=45, c=2, d=4, e=171 << 16, f=Origin.EXTERNAL),
        Frame(Op.VALUE, a=870, e=TypeTag.TUPLE, f=1, digest=b"\1" * 32),
        Frame(Op.DONE, a=6, b=2),
    )
    assert [f.op for f in answer][-1] is Op.DONE
    reader.ask(Op.GOODBYE, 3)
    _then(reader, Frame(Op.BYE))
    reader.end()


VIOLATIONS = {
    "wrong-size frame": lambda r: r.feed(encode(HELLO)[:50]) or r.end(),
    "unknown opcode": lambda r: r.feed(encode(HELLO)[:3] + bytes([99]) + encode(HELLO)[4:]),
    "unrequested answer": lambda r: _then(r, Frame(Op.NODE, a=1, c=0, d=1)),
    "answer to another question": lambda r: (
        r.ask(Op.INSPECT, 2),
        _then(r, Frame(Op.EDGE, a=2, b=1)),
    ),
    "backwards counter": lambda r: r.feed(encode(Frame(Op.STATS, seq=r.seq, a=1))),
    "exhausted frame budget": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, *[Frame(Op.EDGE, a=2, b=1)] * 4),
    ),
    "a counter beyond the run": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.NODE, a=10_000, c=0, d=1)),
    ),
    "a source that is not recorded": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.NODE, a=5, c=SOURCES, d=1)),
    ),
    "an unknown type tag": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.VALUE, a=5, e=99)),
    ),
    "a RAISED with an unknown message flag": lambda r: (
        r.ask(Op.INSPECT, 2),
        _then(r, Frame(Op.RAISED, a=5, e=2)),
    ),
    "a RAISED answering a trace": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.RAISED, a=5)),
    ),
    "DONE for another request": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.DONE, a=0, b=9)),
    ),
    "DONE miscounting its answer": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.EDGE, a=2, b=1), Frame(Op.DONE, a=5, b=2)),
    ),
    "a request op from the runner": lambda r: _then(r, Frame(Op.TRACE)),
    "BYE in the middle of an answer": lambda r: (r.ask(Op.TRACE, 2), _then(r, Frame(Op.BYE))),
    "a frame after BYE": lambda r: (
        r.ask(Op.GOODBYE, 2),
        _then(r, Frame(Op.BYE), Frame(Op.STATS, a=1)),
    ),
    "going away without BYE": lambda r: r.end(),
    "a receipt with an unknown status": lambda r: (
        r.ask(Op.REPLAY, 2),
        _then(r, Frame(Op.RECEIPT, a=1, b=2, e=9)),
    ),
    "a receipt replaying more events than recorded": lambda r: (
        r.ask(Op.REPLAY, 2),
        _then(r, Frame(Op.RECEIPT, a=3, b=2, e=ReplayStatus.BIT_EXACT)),
    ),
    "a divergence with unknown flags": lambda r: (
        r.ask(Op.REPLAY, 2),
        _then(r, Frame(Op.DIVERGENCE, a=1, e=8)),
    ),
    "a divergence in a source that is not recorded": lambda r: (
        r.ask(Op.REPLAY, 2),
        _then(r, Frame(Op.DIVERGENCE, a=1, c=SOURCES, d=5)),
    ),
    "a trace's answer after its divergence": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.DIVERGENCE, a=1), Frame(Op.NODE, a=5, c=0, d=1)),
    ),
    "a divergence after a trace's answer began": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.FRAME_AT, a=900, c=0, d=4), Frame(Op.DIVERGENCE, a=1)),
    ),
    "a divergence ending in DONE": lambda r: (
        r.ask(Op.FLOWS, 2),
        _then(r, Frame(Op.DIVERGENCE, a=1), Frame(Op.FRAME_AT, d=3), Frame(Op.DONE, a=2, b=2)),
    ),
    "a divergence ending in another error": lambda r: (
        r.ask(Op.INSPECT, 2),
        _then(r, Frame(Op.DIVERGENCE, a=1), Frame(Op.FRAME_AT, d=3), Frame(Op.ERROR, e=1, b=2)),
    ),
    "a divergence's location at a counter": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.DIVERGENCE, a=1), Frame(Op.FRAME_AT, a=5, d=3)),
    ),
    "a counter on an error that names no step": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.ERROR, e=ErrorCode.NOT_REACHED, a=5, b=2)),
    ),
    "a step where the passes parted beyond the run": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.ERROR, e=ErrorCode.PASSES, a=1001, b=2)),
    ),
    "a receipt answering a trace": lambda r: (
        r.ask(Op.TRACE, 2),
        _then(r, Frame(Op.RECEIPT, a=1, b=2, e=ReplayStatus.BIT_EXACT)),
    ),
}


def test_a_crash_stack_answer_is_accepted() -> None:
    reader = _loaded_reader()
    reader.ask(Op.INSPECT, 2)
    answer = _then(
        reader,
        Frame(Op.RAISED, a=9, b=2**63, e=1),
        Frame(Op.VALUE, a=9, e=TypeTag.STR, f=16, digest=b"\3" * 32),
        Frame(Op.FRAME_AT, a=9, c=0, d=4),
        Frame(Op.DONE, a=3, b=2),
    )
    assert [f.op for f in answer] == [Op.RAISED, Op.VALUE, Op.FRAME_AT, Op.DONE]


def test_a_replay_answer_is_accepted() -> None:
    reader = _loaded_reader()
    reader.ask(Op.REPLAY, 2)
    answer = _then(
        reader,
        Frame(Op.RECEIPT, a=14, b=20, c=NO_SOURCE, d=3, e=ReplayStatus.DIVERGED, fval=0.2),
        Frame(Op.DIVERGENCE, a=14, b=2**64 - 1, c=1, d=5, e=DivergenceFlags.EXPECTED_EVENT),
        Frame(Op.FRAME_AT, c=NO_SOURCE, d=310, digest=b"\2" * 32),
        Frame(Op.DONE, a=3, b=2),
    )
    assert [f.op for f in answer] == [Op.RECEIPT, Op.DIVERGENCE, Op.FRAME_AT, Op.DONE]


@pytest.mark.parametrize("op", [Op.LOAD, Op.TRACE, Op.FLOWS, Op.INSPECT])
def test_any_question_may_be_answered_by_its_divergence(op: Op) -> None:
    """Before LOADED too: LOAD's survey is the session's first replay."""
    reader = FrameReader(SOURCES) if op is Op.LOAD else _loaded_reader()
    if op is Op.LOAD:
        reader.ask(Op.LOAD, 1)
        _then(reader, HELLO)
    else:
        reader.ask(op, 2)
    answer = _then(
        reader,
        Frame(Op.DIVERGENCE, a=14, b=2**64 - 1, c=1, d=5, e=DivergenceFlags.EXPECTED_EVENT),
        Frame(Op.FRAME_AT, c=NO_SOURCE, d=310, digest=b"\2" * 32),
        Frame(Op.ERROR, e=ErrorCode.DIVERGED, b=reader.asked[1]),  # type: ignore[index]
    )
    assert [f.op for f in answer] == [Op.DIVERGENCE, Op.FRAME_AT, Op.ERROR]
    assert reader.asked is None


@pytest.mark.parametrize("op", [Op.TRACE, Op.FLOWS])
def test_a_question_whose_passes_parted_names_the_step(op: Op) -> None:
    """ERROR PASSES: the question's passes replayed the run differently from the step in `a`
    (one of the run's), and nothing else comes with it."""
    reader = _loaded_reader()
    reader.ask(op, 2)
    (error,) = _then(reader, Frame(Op.ERROR, e=ErrorCode.PASSES, a=1000, b=2))
    assert (ErrorCode(error.e), error.a, reader.asked) == (ErrorCode.PASSES, 1000, None)


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_each_violation_ends_the_session(case: str) -> None:
    reader = _loaded_reader(budget=3)
    with pytest.raises(FrameError):
        VIOLATIONS[case](reader)


def test_the_runner_must_begin_with_hello() -> None:
    reader = FrameReader(SOURCES)
    with pytest.raises(FrameError, match="HELLO"):
        reader.feed(_wire(LOADED))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4 * FRAME_SIZE), st.integers(min_value=1, max_value=FRAME_SIZE))
def test_any_bytes_are_frames_or_one_frame_error(data: bytes, chunk: int) -> None:
    reader = FrameReader(SOURCES, budget=10)
    try:
        for i in range(0, len(data), chunk):
            reader.feed(data[i : i + chunk])
        reader.end()
    except FrameError:
        pass


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(Op)),
            st.integers(0, 2**64 - 1),
            st.integers(0, 2**64 - 1),
            st.integers(0, 2**32 - 1),
            st.integers(0, 2**32 - 1),
            st.integers(0, 2**32 - 1),
            st.integers(-(2**63), 2**63 - 1),
        ),
        max_size=12,
    )
)
def test_well_formed_frames_with_any_fields_never_crash_the_reader(
    fields: list[tuple[Op, int, int, int, int, int, int]],
) -> None:
    reader = _loaded_reader(budget=5)
    reader.ask(Op.TRACE, 2)
    frames = [Frame(op, a=a, b=b, c=c, d=d, e=e, ival=iv) for op, a, b, c, d, e, iv in fields]
    with contextlib.suppress(FrameError):
        _then(reader, *frames)
