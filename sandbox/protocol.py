"""The pipe protocol between the agent and the replay runner in the sandbox.

Container → agent: every frame is exactly FRAME_SIZE bytes with the same fixed fields. No
field is a string, a repr or of variable length: counters, small integers, an int64 and a
float64 payload, and a 32-byte digest keyed with the session key the agent supplied. The
agent can read values only by matching a digest against something it already holds.

Agent → container: a request is a fixed header (the same layout) followed by at most
MAX_REQUEST_TEXT bytes of UTF-8 (an expression such as `order.total_price`, after the
function's name for a return stop); the agent is the trusted side and the runner checks
requests anyway.

    offset  field   type
    0       magic   u16   0x5354
    2       version u8    PROTOCOL_VERSION
    3       op      u8    Op
    4       seq     u32   1, 2, 3, … per direction: never repeats, never goes back
    8       a       u64   a counter (instruction step)
    16      b       u64   a second counter, an event index, or 2**64-1 for none
    24      c       u32   a source index (the recording's sources sorted by path), or NO_SOURCE
    28      d       u32   a line, a count or a frame number
    32      e       u32   a type tag, an opcode (op << 16 | oparg & 0xFFFF), or an origin kind
    36      f       u32   a length, or a request's text length
    40      ival    i64
    48      fval    f64
    56      digest  32 bytes (keyed BLAKE2b-256)
    88

Invariants (the agent's FrameReader enforces them and ends the session on the first
violation): a frame is exactly FRAME_SIZE bytes; magic and version match; the op is one this
direction may send and answers the question asked (HELLO first, LOADED once, then for each
request its answer frames ending in DONE or ERROR, BYE last; a question whose replay diverged
is answered by DIVERGENCE, FRAME_AT and ERROR DIVERGED, nothing else); seq increases by one;
fields are within their ranges (a counter is at most the run's instruction count once LOADED gave
it, a source index names a recorded source or is NO_SOURCE, a tag is known); an answer has
at most `budget` frames; silence longer than the timeout is a violation.
"""

from __future__ import annotations

import enum
import os
import struct
from dataclasses import dataclass, replace
from typing import Any

from ._errors import QueryError
from .questions import (
    MAX_TEXT_BYTES,
    At,
    Flows,
    InspectStack,
    Question,
    Replay,
    Trace,
    parse_at,
    parse_from,
    resolve_source,
)

__all__ = [
    "CUTS",
    "DIGEST_OFFSET",
    "FRAME_SIZE",
    "MAX_REQUEST_TEXT",
    "NONE",
    "NO_SOURCE",
    "PROTOCOL_VERSION",
    "Cut",
    "DivergenceFlags",
    "Frame",
    "FrameError",
    "FrameReader",
    "Op",
    "Origin",
    "ReplayStatus",
    "Stop",
    "TypeTag",
    "decode",
    "encode",
    "question_of",
    "request_for",
    "source_texts",
    "sources_of",
    "stop_of",
]

PROTOCOL_VERSION = 9
MAGIC = 0x5354
FRAME_SIZE = 88
MAX_REQUEST_TEXT = MAX_TEXT_BYTES  # a request's text, in bytes
NO_SOURCE = 0xFFFF_FFFF
NONE = 2**64 - 1
MAX_LINE = 10_000_000
_LAYOUT = struct.Struct("<HBBIQQIIIIqd32s")
assert _LAYOUT.size == FRAME_SIZE
# Where the digest field starts: the agent writes the session key (LOAD's digest) there itself,
# from a buffer it wipes, so the key is never in a `bytes` made by encode().
DIGEST_OFFSET = FRAME_SIZE - 32


class Op(enum.IntEnum):
    # container → agent
    HELLO = 1  # a: engine version hex, d: FRAME_SIZE
    LOADED = 2  # a: instructions, b: end counter, ival: crash counter (0 none), d: sources
    STATS = 3  # a: instructions, b: depth mismatches, d: live frames, ival: tracked slots
    NODE = 4  # a: counter, b: event or NONE, c/d: source/line, e: opcode << 16 | Cut (why
    #           its inputs were not followed), f: origin kind, ival: the function name's
    #           digest (first 8 bytes), digest: the operation's
    VALUE = 5  # a: counter it belongs to, e: type tag, f: length, ival/fval, digest; b: type
    EDGE = 6  # a: counter, b: an input's counter, d: 1 where the tree expands the input (its
    #           own EDGE frames follow; a step is expanded once), else 0
    FRAME_AT = 7  # a: stop counter, c/d: source/line, f: frame number (0 innermost);
    #               answering TRACE: ival the traced window's event + 1 (0: the whole run)
    LOCAL = 8  # a: tag, d: frame number, digest: the name's digest; its VALUE follows
    REACH = 9  # a: first counter, c/d: source/line, ival: times
    OUTPUT = 10  # a: counter, b: event index
    DONE = 11  # a: frames in this answer (this one excluded), b: the request's seq
    ERROR = 12  # e: ErrorCode, b: the request's seq
    BYE = 13
    RECEIPT = 14  # a: events replayed, b: events recorded, c: the replayed exit status (NO_SOURCE:
    #              none), d: outputs matched, e: ReplayStatus, ival: output bytes, fval: seconds,
    #              digest: the recorded event stream's digest, keyed
    DIVERGENCE = 15  # a: event index, b: the first differing output byte or NONE, c/d: the
    #                 application's source/line (NO_SOURCE: none), e: DivergenceFlags, f: the
    #                 program's output length, ival: the call's name digest (first 8 bytes),
    #                 digest: its arguments' digest, keyed
    RAISED = 16  # a: the crash counter, b: the exception type name's digest (first 8 bytes, as
    #              VALUE's b), e: 1 when its message's VALUE follows (0: not shown)
    # agent → container
    LOAD = 64  # f: recording length, the plaintext follows; a: checkpoint interval,
    #           b: the memory limit in bytes for everything the runner starts (0: none),
    #           e: 1 for a receipt-only session (no engine: LOADED counts nothing)
    TRACE = 65  # a: counter or 0, c/d: source/line, e: Stop, ival: hit, f: text (expr), b: depth;
    #            Stop.REQUEST: c 1 to trace the whole run (0: from the request's window)
    #            Stop.RETURN: c the source or NO_SOURCE, d the function name's length in
    #            characters (the text's first d characters, the expression after them)
    FLOWS = 66  # like TRACE, or b: event index with e: Stop.EVENT
    INSPECT = 67  # like TRACE without an expression
    ASK_STATS = 68
    GOODBYE = 69
    REPLAY = 70  # replay once without the engine: RECEIPT, and if it diverged DIVERGENCE and
    #             FRAME_AT (the innermost location: c/d, digest: its file's path, keyed)


CONTAINER_OPS = frozenset(op for op in Op if op < 64)
AGENT_OPS = frozenset(op for op in Op if op >= 64)


class Stop(enum.IntEnum):
    """Where a request stops the run (a request frame's `e`)."""

    COUNTER = 1
    LINE = 2
    CRASH = 3
    END = 4
    EVENT = 5
    RETURN = 6  # a function's return (before its RETURN_VALUE), named in the request's text
    OUTPUT = 7  # before the instruction whose call wrote the run's last output
    REQUEST = 8  # before the call that sent the last bytes of request `ival` of the index


class ReplayStatus(enum.IntEnum):
    BIT_EXACT = 1
    DIVERGED = 2
    STOPPED = 3


class DivergenceFlags(enum.IntFlag):
    EXPECTED_EVENT = 1  # the program met recorded event `a` (else: the recording's end)
    OUTPUT = 2  # an output's bytes differed (b, f)
    ARGUMENTS = 4  # the call had arguments (digest)


class TypeTag(enum.IntEnum):
    NONE = 1
    BOOL = 2
    INT = 3  # ival when it fits in int64, else digest only
    FLOAT = 4  # fval
    STR = 5  # f: length in code points, digest
    BYTES = 6  # f: length, digest
    LIST = 7
    TUPLE = 8
    DICT = 9
    SET = 10
    OTHER = 11  # b: the type name's digest (first 8 bytes), digest of the shown form


class Cut(enum.IntEnum):
    """Why a trace did not follow a NODE's inputs (the low bits of its `e`)."""

    NONE = 0
    DEPTH = 1  # the depth bound
    LIMIT = 2  # the slice's node or edge limit
    ITEMS = 3  # more items than a pass reads
    WINDOW = 4  # made before the traced window (a trace at request:N in a session)


# The reasons the in-process answerer gives (Inquiry.last_cuts) and their frame values.
CUTS = {"depth": Cut.DEPTH, "limit": Cut.LIMIT, "items": Cut.ITEMS, "window": Cut.WINDOW}


class Origin(enum.IntEnum):
    NONE = 0
    EXTERNAL = 1
    CONSTANT = 2
    ARGV = 3
    ENV = 4
    UNKNOWN = 5
    WINDOW = 6  # the "made before the traced window" marker


class ErrorCode(enum.IntEnum):
    NOT_REACHED = 1
    BAD_EXPRESSION = 2
    NO_PRODUCER = 3
    DIVERGED = 4
    BAD_REQUEST = 5
    INTERNAL = 6
    ENVIRONMENT = 7  # this image cannot replay the recording (Python, distributions, flags)
    CORRUPT = 8  # the event stream does not decode
    MEMORY = 9  # the replay was killed at the session's memory limit
    PASSES = 10  # the passes of one question replayed the run differently; a: the step


class FrameError(ValueError):
    """A frame that breaks the protocol: the session ends and the sandbox is torn down."""


@dataclass(frozen=True)
class Frame:
    op: Op
    seq: int = 0
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0
    e: int = 0
    f: int = 0
    ival: int = 0
    fval: float = 0.0
    digest: bytes = bytes(32)


def encode(frame: Frame) -> bytes:
    return _LAYOUT.pack(
        MAGIC,
        PROTOCOL_VERSION,
        int(frame.op),
        frame.seq,
        frame.a,
        frame.b,
        frame.c,
        frame.d,
        frame.e,
        frame.f,
        frame.ival,
        frame.fval,
        frame.digest,
    )


def decode(data: bytes) -> Frame:
    """One frame from exactly FRAME_SIZE bytes; FrameError for anything else."""
    if len(data) != FRAME_SIZE:
        raise FrameError(f"a frame is {FRAME_SIZE} bytes, not {len(data)}")
    magic, version, op, seq, a, b, c, d, e, f, ival, fval, digest = _LAYOUT.unpack(data)
    if magic != MAGIC:
        raise FrameError(f"bad magic {magic:#06x}")
    if version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {version}, expected {PROTOCOL_VERSION}")
    try:
        kind = Op(op)
    except ValueError:
        raise FrameError(f"unknown opcode {op}") from None
    return Frame(kind, seq, a, b, c, d, e, f, ival, fval, digest)


# Any question's replay may diverge: then DIVERGENCE, its FRAME_AT and ERROR DIVERGED answer
# it (REPLAY's RECEIPT says so itself, and comes first).
_DIVERGED = (Op.DIVERGENCE, Op.FRAME_AT, Op.ERROR)
_ANSWERS: dict[Op, frozenset[Op]] = {
    Op.TRACE: frozenset({Op.NODE, Op.VALUE, Op.EDGE, Op.FRAME_AT}),
    Op.FLOWS: frozenset({Op.REACH, Op.OUTPUT, Op.VALUE, Op.FRAME_AT}),
    Op.INSPECT: frozenset({Op.FRAME_AT, Op.LOCAL, Op.VALUE, Op.RAISED}),
    Op.ASK_STATS: frozenset({Op.STATS}),
    Op.LOAD: frozenset({Op.LOADED}),
    Op.REPLAY: frozenset({Op.RECEIPT, Op.DIVERGENCE, Op.FRAME_AT}),
}


class FrameReader:
    """The agent's check of everything the runner sends (see the module docstring).

    feed() takes bytes as they arrive and returns the complete frames; ask() and answered()
    tell it which question is open. Any violation raises FrameError.
    """

    def __init__(self, sources: int, budget: int = 100_000) -> None:
        self.sources = sources
        self.budget = budget
        self.buffer = b""
        self.seq = 0
        self.hello = False
        self.instructions: int | None = None
        self.asked: tuple[Op, int] | None = None  # (request op, request seq)
        self.in_answer = 0
        self.diverged = 0  # frames of a question's divergence seen so far (_DIVERGED)
        self.closed = False

    def ask(self, op: Op, seq: int) -> None:
        if op not in AGENT_OPS:
            raise ValueError(f"{op.name} is not a request")
        if self.asked is not None:
            raise ValueError("one question at a time")
        self.asked = (op, seq)
        self.in_answer = 0
        self.diverged = 0

    def feed(self, data: bytes) -> list[Frame]:
        self.buffer += data
        frames = []
        while len(self.buffer) >= FRAME_SIZE:
            raw, self.buffer = self.buffer[:FRAME_SIZE], self.buffer[FRAME_SIZE:]
            frames.append(self._check(decode(raw)))
        return frames

    def end(self) -> None:
        """The runner's pipe reached end of file."""
        if self.buffer:
            raise FrameError(f"{len(self.buffer)} bytes left over: a truncated frame")
        if not self.closed:
            raise FrameError("the runner went away without BYE")

    def _check(self, fr: Frame) -> Frame:
        if self.closed:
            raise FrameError("a frame after BYE")
        if fr.op not in CONTAINER_OPS:
            raise FrameError(f"{fr.op.name} may not come from the runner")
        if fr.seq != self.seq + 1:
            raise FrameError(f"frame seq {fr.seq} after {self.seq}")
        self.seq = fr.seq
        if not self.hello:
            if fr.op is not Op.HELLO or fr.a == 0 or fr.d != FRAME_SIZE:
                raise FrameError("the runner must begin with HELLO")
            self.hello = True
            return fr
        if fr.op is Op.BYE:
            if self.asked is not None and self.asked[0] is not Op.GOODBYE:
                raise FrameError("BYE in the middle of an answer")
            self.closed = True
            return fr
        if self.asked is None:
            raise FrameError(f"{fr.op.name} answers no question")
        op, request_seq = self.asked
        if op is not Op.REPLAY and (self.diverged or fr.op is Op.DIVERGENCE):
            return self._diverged(fr)
        if fr.op in (Op.DONE, Op.ERROR):
            if fr.b != request_seq:
                raise FrameError(f"{fr.op.name} for request {fr.b}, not {request_seq}")
            if fr.op is Op.DONE and fr.a != self.in_answer:
                raise FrameError(f"DONE counts {fr.a} frames, {self.in_answer} came")
            if fr.op is Op.ERROR and fr.e not in ErrorCode._value2member_map_:
                raise FrameError(f"unknown error code {fr.e}")
            if fr.op is Op.ERROR and fr.a and (fr.e != ErrorCode.PASSES or not self._counts(fr.a)):
                raise FrameError(f"ERROR {ErrorCode(fr.e).name} carries a counter out of place")
            self.asked = None
            return fr
        if fr.op not in _ANSWERS.get(op, frozenset()):
            raise FrameError(f"{fr.op.name} does not answer {op.name}")
        self.in_answer += 1
        if self.in_answer > self.budget:
            raise FrameError(f"more than {self.budget} frames in one answer")
        self._ranges(fr)
        return fr

    def _diverged(self, fr: Frame) -> Frame:
        """A question other than REPLAY whose replay diverged: DIVERGENCE first in its answer,
        then FRAME_AT, then ERROR DIVERGED."""
        if fr.op is not _DIVERGED[self.diverged] or (self.in_answer and not self.diverged):
            raise FrameError(f"{fr.op.name} where a divergence's frames go")
        self.diverged += 1
        if fr.op is Op.ERROR:
            if fr.b != self.asked[1] or fr.e != ErrorCode.DIVERGED:  # type: ignore[index]
                raise FrameError("a divergence ends in ERROR DIVERGED for the open request")
            self.asked = None
            return fr
        if fr.op is Op.FRAME_AT and fr.a:
            raise FrameError("a divergence's FRAME_AT carries no counter")
        self._locations(fr)
        return fr

    def _counts(self, counter: int) -> bool:
        """Whether `counter` can be a step of the run LOADED described."""
        return self.instructions is not None and counter <= self.instructions

    def _ranges(self, fr: Frame) -> None:
        limit = self.instructions
        if fr.op is Op.LOADED:
            if self.instructions is not None:
                raise FrameError("LOADED twice")
            if fr.b > fr.a or not 0 <= fr.ival <= fr.a:
                raise FrameError("LOADED counters out of range")
            self.instructions = fr.a
            return
        if limit is None:
            raise FrameError(f"{fr.op.name} before LOADED")
        counters = {
            Op.NODE: (fr.a,),
            Op.VALUE: (fr.a,),
            Op.EDGE: (fr.a, fr.b),
            Op.FRAME_AT: (fr.a,),
            Op.REACH: (fr.a,),
            Op.OUTPUT: (fr.a,),
            Op.STATS: (fr.a,),
            Op.RAISED: (fr.a,),
        }.get(fr.op, ())
        for counter in counters:
            if counter > limit and counter < (1 << 62):
                raise FrameError(f"{fr.op.name} counter {counter} beyond the run ({limit})")
        if fr.op in (Op.NODE, Op.FRAME_AT, Op.REACH):
            if fr.c >= self.sources and fr.c != NO_SOURCE:
                raise FrameError(f"source index {fr.c} out of range")
            if fr.d > MAX_LINE:
                raise FrameError(f"line {fr.d} out of range")
        if fr.op is Op.NODE and fr.f not in Origin._value2member_map_:
            raise FrameError(f"unknown origin kind {fr.f}")
        if fr.op is Op.NODE and (fr.e & 0xFFFF) not in Cut._value2member_map_:
            raise FrameError(f"unknown cut {fr.e & 0xFFFF}")
        if fr.op is Op.EDGE and fr.d not in (0, 1):
            raise FrameError(f"EDGE expansion flag {fr.d}")
        if fr.op is Op.VALUE and fr.e not in TypeTag._value2member_map_:
            raise FrameError(f"unknown type tag {fr.e}")
        if fr.op is Op.RAISED and fr.e not in (0, 1):
            raise FrameError(f"RAISED message flag {fr.e}")
        if fr.op is Op.REACH and fr.ival < 1:
            raise FrameError("REACH counts at least one use")
        if fr.op is Op.RECEIPT and (
            fr.e not in ReplayStatus._value2member_map_ or fr.a > fr.b or not fr.fval >= 0
        ):
            raise FrameError("RECEIPT fields out of range")
        if fr.op is Op.DIVERGENCE:
            self._locations(fr)

    def _locations(self, fr: Frame) -> None:
        """A divergence's and its FRAME_AT's fields, which need no LOADED."""
        if fr.op is Op.DIVERGENCE and fr.e & ~int(DivergenceFlags(7)):
            raise FrameError(f"unknown divergence flags {fr.e:#x}")
        if (fr.c >= self.sources and fr.c != NO_SOURCE) or fr.d > MAX_LINE:
            raise FrameError(f"{fr.op.name} location out of range")


# -- questions as requests: the one mapping both ends use -----------------------------------


def sources_of(parsed: Any) -> list[str]:
    """The recorded source paths in the order both ends number them (a frame's `c`)."""
    return sorted({s.path for s in parsed.sources.values() if not s.path.endswith(os.sep)})


def source_texts(parsed: Any) -> dict[str, bytes]:
    """Each recorded source path's text: where both ends find the function a return stop
    names (sealtrace.sandbox.questions.resolve_function)."""
    return {
        s.path: parsed.blobs[s.digest]
        for s in parsed.sources.values()
        if not s.path.endswith(os.sep) and s.digest in parsed.blobs
    }


def stop_of(question: Question) -> At | None:
    """Where a question stops the run (None for a replay or flows from an event)."""
    if isinstance(question, (Trace, InspectStack)):
        return parse_at(question.at)
    if isinstance(question, Flows):
        event, _expr, at = parse_from(question.source.strip())
        return None if event is not None else parse_at(at)
    return None


def request_for(question: Question, sources: list[str]) -> tuple[Frame, bytes]:
    """The request frame that asks `question`, and the text that follows it; `sources` are
    the recording's source paths in the order both ends number them. A text the runner would
    refuse (and end the session for) is refused here, as a bad question."""
    frame, text = _request(question, sources)
    if len(text) > MAX_REQUEST_TEXT:
        raise QueryError(f"the expression is longer than {MAX_REQUEST_TEXT} bytes in UTF-8")
    return frame, text


def _request(question: Question, sources: list[str]) -> tuple[Frame, bytes]:
    if isinstance(question, Trace):
        stop = parse_at(question.at)
        # c: 1 to trace the whole run at request:N (c names no source for that stop).
        whole = 1 if question.whole_run and stop.request is not None else 0
        return _located(Frame(Op.TRACE, b=question.depth, c=whole), stop, question.var, sources)
    if isinstance(question, InspectStack):
        return _located(Frame(Op.INSPECT), parse_at(question.at), "", sources)
    if isinstance(question, Flows):
        event, expr, at = parse_from(question.source.strip())
        if event is not None:
            return Frame(Op.FLOWS, e=Stop.EVENT, b=event), b""
        return _located(Frame(Op.FLOWS), parse_at(at), expr, sources)
    if isinstance(question, Replay):
        return Frame(Op.REPLAY), b""
    raise QueryError(f"{question.kind} has no request frame")


def _located(request: Frame, at: At, expr: str, sources: list[str]) -> tuple[Frame, bytes]:
    """`request` stopping at `at`, and its text: a return stop's function name, then the
    expression."""
    text = ((at.function or "") + expr).encode()
    return replace(_stop(request, at, sources), f=len(text)), text


def question_of(request: Frame, text: str, sources: list[str]) -> Question:
    """The question a request frame asks (the runner's side of request_for)."""
    function = ""
    if request.e == Stop.RETURN and request.op in (Op.TRACE, Op.INSPECT, Op.FLOWS):
        if not 0 < request.d <= len(text):
            raise QueryError("a return stop's function name is not in the request's text")
        function, text = text[: request.d], text[request.d :]
    if request.op is Op.TRACE:
        at = _at_text(request, sources, function)
        whole = request.e == Stop.REQUEST and request.c == 1
        return Trace(at=at, var=text, depth=int(request.b), whole_run=whole)
    if request.op is Op.INSPECT:
        return InspectStack(at=_at_text(request, sources, function))
    if request.op is Op.FLOWS:
        if request.e == Stop.EVENT:
            return Flows(source=f"event:{request.b}")
        return Flows(source=f"{text}@{_at_text(request, sources, function)}")
    if request.op is Op.REPLAY:
        return Replay()
    raise QueryError(f"{request.op.name} asks no question")


def _stop(request: Frame, at: At, sources: list[str]) -> Frame:
    """`request` with the fields that say where it stops the run."""
    if at.special == "crash":
        return replace(request, e=Stop.CRASH)
    if at.special == "end":
        return replace(request, e=Stop.END)
    if at.special == "output":
        return replace(request, e=Stop.OUTPUT)
    if at.request is not None:
        return replace(request, e=Stop.REQUEST, ival=at.request)
    if at.counter is not None:
        return replace(request, e=Stop.COUNTER, a=at.counter)
    source = NO_SOURCE  # a return stop without a file: the runner finds the one that has it
    if at.file is not None:
        path = resolve_source(at.file, sources)
        if path not in sources:
            raise QueryError(f"{at.file} is not a recorded source file")
        source = sources.index(path)
    if at.function is not None:
        return replace(request, e=Stop.RETURN, c=source, d=len(at.function), ival=at.hit)
    assert at.line is not None
    return replace(request, e=Stop.LINE, c=source, d=at.line, ival=at.hit)


def _at_text(request: Frame, sources: list[str], function: str = "") -> str:
    try:
        kind = Stop(request.e)
    except ValueError:
        raise QueryError(f"unknown stop kind {request.e}") from None
    if kind is Stop.COUNTER:
        return str(request.a)
    if kind is Stop.CRASH:
        return "crash"
    if kind is Stop.END:
        return "end"
    if kind is Stop.OUTPUT:
        return "output"
    hit = max(1, request.ival)
    if kind is Stop.REQUEST:
        return f"request:{hit}"
    if kind is Stop.RETURN and request.c == NO_SOURCE:
        return f"return:{function}#{hit}"
    if kind is Stop.EVENT or request.c >= len(sources):
        raise QueryError("no such source")
    if kind is Stop.RETURN:
        return f"return:{sources[request.c]}:{function}#{hit}"
    return f"{sources[request.c]}:{request.d}#{hit}"


def numbered(frames: list[Frame], start: int = 1) -> list[Frame]:
    """The frames with consecutive seq numbers from `start` (the runner's writer)."""
    return [replace(fr, seq=start + i) for i, fr in enumerate(frames)]


def describe(frame: Frame) -> dict[str, Any]:
    """A frame as a plain dict, for logs and error messages (digests in hex)."""
    return {
        "op": frame.op.name,
        "seq": frame.seq,
        "a": frame.a,
        "b": frame.b,
        "c": frame.c,
        "d": frame.d,
        "e": frame.e,
        "f": frame.f,
        "ival": frame.ival,
        "fval": frame.fval,
        "digest": frame.digest.hex(),
    }
