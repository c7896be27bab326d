"""The replay runner: the one process the agent talks to inside the sandbox.

    python -m sealtrace.sandbox.runner INPUT OUTPUT

It reads requests and the plaintext recording from INPUT (a pipe or FIFO), answers with the
provenance engine (sealtrace.sandbox._inquiry, replaying in child processes with fork
checkpoints), and writes nothing but fixed-size frames (sealtrace.sandbox.protocol) to
OUTPUT. Its own stdout and stderr, and the replayed program's, go nowhere: what the program
prints is compared by the replay, never forwarded. Strings leave only as digests keyed with
the session key the agent sent in LOAD.
"""

from __future__ import annotations

import dis
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sealtrace.proxy.format import CodecError, ParsedStream, parse_stream

from ._checkpoints import CheckpointPolicy
from ._errors import DivergenceError, PassesDisagreedError, QueryError, ReplayEnvironmentError
from ._inquiry import Inquiry
from ._memory import MemoryWatch
from ._provenance import (
    ARGV_TAG,
    BEFORE_TAG,
    CUT_TAG,
    ENV_TAG,
    MARKER_OPS,
    UNKNOWN_TAG,
    keyed_digest,
    origin_tag_kind,
)
from ._replay import describe_event
from .protocol import (
    CUTS,
    FRAME_SIZE,
    MAX_REQUEST_TEXT,
    NO_SOURCE,
    NONE,
    DivergenceFlags,
    ErrorCode,
    Frame,
    Op,
    Origin,
    ReplayStatus,
    decode,
    encode,
    numbered,
    question_of,
    sources_of,
)
from .questions import (
    Flows,
    FlowsAnswer,
    InspectStack,
    Node,
    ReceiptAnswer,
    Replay,
    StackAnswer,
    Trace,
    TraceAnswer,
    ask,
)

__all__ = ["main"]

_ORIGINS = {
    None: Origin.NONE,
    "external": Origin.EXTERNAL,
    "constant": Origin.CONSTANT,
    "argv": Origin.ARGV,
    "env": Origin.ENV,
    "unknown": Origin.UNKNOWN,
    "window": Origin.WINDOW,
}
ENGINE_VERSION = 0x0001_0000
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


class Runner:
    def __init__(self, inp: int, out: int) -> None:
        self.inp = inp
        self.out = out
        self.seq = 0
        self.session: Inquiry | None = None
        self.parsed: ParsedStream | None = None
        self.receipt_only = False
        self.sources: list[str] = []
        self.key = b""
        self.watch: MemoryWatch | None = None
        # The frames that carry each kind's answer (the engine answers through the contract).
        self._encoders: dict[str, Callable[[Any], Iterator[Frame]]] = {
            Trace.kind: self._trace_frames,
            Flows.kind: self._flow_frames,
            InspectStack.kind: self._stack_frames,
            Replay.kind: self._receipt_frames,
        }

    # -- wire -----------------------------------------------------------------------------

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = os.read(self.inp, min(n, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _send(self, frames: list[Frame]) -> None:
        data = b"".join(encode(fr) for fr in numbered(frames, self.seq + 1))
        self.seq += len(frames)
        view = memoryview(data)
        while view:
            view = view[os.write(self.out, view) :]

    def serve(self) -> None:
        self._send([Frame(Op.HELLO, a=ENGINE_VERSION, d=FRAME_SIZE)])
        while True:
            try:
                request = decode(self._read(FRAME_SIZE))
            except EOFError:
                return
            text = b""
            if request.op is not Op.LOAD and request.f:
                if request.f > MAX_REQUEST_TEXT:
                    self._send([Frame(Op.ERROR, e=ErrorCode.BAD_REQUEST, b=request.seq)])
                    return
                text = self._read(request.f)
            if request.op is Op.GOODBYE:
                self._send([Frame(Op.BYE)])
                return
            if self.watch is not None and self.watch.fired:
                # Everything the runner started is gone: no later answer can be given.
                self._send([Frame(Op.ERROR, e=ErrorCode.MEMORY, b=request.seq)])
                continue
            try:
                answer = list(self._answer(request, text.decode("utf-8")))
            except Exception as exc:
                code = self._error_code(exc)
                where = self._diverged_at(exc) if code is ErrorCode.DIVERGED else []
                step = exc.step if isinstance(exc, PassesDisagreedError) else 0
                self._send([*where, Frame(Op.ERROR, e=code, b=request.seq, a=step)])
                continue
            self._send([*answer, Frame(Op.DONE, a=len(answer), b=request.seq)])

    def _diverged_at(self, exc: Exception) -> list[Frame]:
        """Where a pass diverged, as the receipt says it (DIVERGENCE and FRAME_AT), for the
        agent to name the event, the call and the location as an in-process replay does."""
        divergence = getattr(exc, "divergence", None)
        if not divergence or self.parsed is None:
            return []
        return list(self._divergence_frames(divergence))

    def _error_code(self, exc: Exception) -> ErrorCode:
        if self.watch is not None and self.watch.fired:
            return ErrorCode.MEMORY
        for kind, code in (
            (QueryError, ErrorCode.NOT_REACHED),
            (PassesDisagreedError, ErrorCode.PASSES),
            (DivergenceError, ErrorCode.DIVERGED),
            (ReplayEnvironmentError, ErrorCode.ENVIRONMENT),
            (CodecError, ErrorCode.CORRUPT),
        ):
            if isinstance(exc, kind):
                return code
        return ErrorCode.INTERNAL

    # -- answers --------------------------------------------------------------------------

    def _answer(self, request: Frame, text: str) -> Iterator[Frame]:
        if request.op is Op.LOAD:
            yield self._load(request)
            return
        session = self.session
        if session is None:
            raise QueryError("LOAD first")
        if self.receipt_only and request.op is not Op.REPLAY:
            raise QueryError("a receipt-only session answers nothing but its receipt")
        if request.op is Op.ASK_STATS:
            survey = session.survey()
            stats = survey.get("stats", {})
            yield Frame(
                Op.STATS,
                a=int(survey["instructions"]),
                b=int(stats.get("depth_mismatches", 0)),
                d=int(stats.get("live_frames", 0)),
                ival=int(stats.get("tracked_slots", 0)),
            )
            return
        question = question_of(request, text, self.sources)
        answer: Any = ask(session, question)
        yield from self._encoders[question.kind](answer)

    def _load(self, request: Frame) -> Frame:
        data = self._read(request.f)
        self.key = request.digest
        if request.b and self.watch is None:
            self.watch = MemoryWatch(int(request.b)).start()
        parsed = parse_stream(data)
        self.sources = sources_of(parsed)
        self.parsed = parsed
        self.receipt_only = request.e == 1
        if self.receipt_only:  # no engine, nothing to count
            self.session = Inquiry(data, parsed, digest_key=self.key)
            return Frame(Op.LOADED, d=len(self.sources))
        self.session = Inquiry(
            data,
            parsed,
            checkpoints=CheckpointPolicy(int(request.a) or 250_000, 64),
            digest_key=self.key,
        )
        survey = self.session.survey()
        return Frame(
            Op.LOADED,
            a=int(survey["instructions"]),
            b=int(survey["end"]),
            ival=int(survey["crash"]),
            d=len(self.sources),
        )

    def _receipt_frames(self, d: ReceiptAnswer) -> Iterator[Frame]:
        """One plain replay (no engine): its receipt, and where and how it diverged."""
        parsed = self.parsed
        assert parsed is not None
        status = {"bit-exact": ReplayStatus.BIT_EXACT, "stopped": ReplayStatus.STOPPED}.get(
            d["status"], ReplayStatus.DIVERGED
        )
        replayed = d["exit_status"]["replayed"]
        yield Frame(
            Op.RECEIPT,
            a=int(d["events_replayed"]),
            b=int(d["events_recorded"]),
            c=NO_SOURCE if replayed is None else int(replayed) & 0xFFFF_FFFF,
            d=int(d["outputs_matched"]),
            e=status,
            ival=int(d["output_bytes"]),
            fval=float(d["seconds"]),
            digest=self._digest("stream", d["stream_digest"]),
        )
        div = d.get("divergence")
        if div is not None:
            yield from self._divergence_frames(div)

    def _divergence_frames(self, div: Mapping[str, Any]) -> Iterator[Frame]:
        parsed = self.parsed
        assert parsed is not None
        flags = DivergenceFlags(0)
        event = int(div["event"])
        if event < len(parsed.events) and div["expected"] == describe_event(parsed.events[event]):
            flags |= DivergenceFlags.EXPECTED_EVENT
        if "offset" in div:
            flags |= DivergenceFlags.OUTPUT
        call, _, args = str(div["actual"]).partition("(args ")
        if args:
            flags |= DivergenceFlags.ARGUMENTS
        app_file, app_line = _split_location(div.get("app_location"))
        yield Frame(
            Op.DIVERGENCE,
            a=event,
            b=int(div["offset"]) if "offset" in div else NONE,
            c=self._source(app_file) if app_file else NO_SOURCE,
            d=app_line,
            e=int(flags),
            f=min(int(div.get("actual_length", 0)), 2**32 - 1),
            ival=int.from_bytes(self._digest("call", call)[:8], "little", signed=True),
            digest=self._digest("args", args.rstrip(")")) if args else bytes(32),
        )
        file, line = _split_location(div.get("location"))
        yield Frame(Op.FRAME_AT, c=self._source(file), d=line, digest=self._digest("path", file))

    def _source(self, path: str) -> int:
        try:
            return self.sources.index(path)
        except ValueError:
            return NO_SOURCE

    def _digest(self, kind: str, text: str) -> bytes:
        return bytes.fromhex(keyed_digest(self.key, kind, text.encode("utf-8", "surrogatepass")))

    def _value(self, counter: int, summary: Mapping[str, Any] | None) -> Frame:
        box = (summary or {}).get("sandbox") or {"tag": 11, "digest": "00" * 32}
        return Frame(
            Op.VALUE,
            a=counter,
            b=int(box.get("type_digest", "0"), 16),
            e=int(box["tag"]),
            f=min(int(box.get("length", 0)), 2**32 - 1),
            ival=int(box.get("bool", False)) if box["tag"] == 2 else int(box.get("int", 0)),
            fval=float(box.get("float", 0.0)),
            digest=bytes.fromhex(box["digest"]),
        )

    def _trace_frames(self, doc: TraceAnswer) -> Iterator[Frame]:
        q = doc["query"]
        stop = q["stopped_at"]
        via = q.get("slot") or ""
        yield Frame(
            Op.FRAME_AT,
            a=int(stop["counter"]),
            b=int(q.get("passes", 0)),
            c=self._source(stop["file"] or ""),
            d=int(stop["line"] or 0),
            e=1 if q.get("truncated") else 0,
            f=len(via),
            ival=int(q["window"]) + 1 if q.get("window") is not None else 0,
        )
        yield self._value(0, q["value"])
        emitted: set[int] = set()
        cuts = self.session.last_cuts if self.session is not None else {}
        for node in _walk(doc["root"]):
            key = _key(node)
            seeded = origin_tag_kind(key)
            if key not in emitted:
                emitted.add(key)
                opname, _, argrepr = node["op"].partition(" ")
                origin: Mapping[str, Any] = node["origin"] or {}
                event = origin.get("event")
                if seeded is not None:
                    event = seeded[1]
                yield Frame(
                    Op.NODE,
                    a=key,
                    b=NONE if event is None else int(event),
                    c=self._source(node["file"]),
                    d=int(node["line"]),
                    e=(dis.opmap.get(opname, 0) << 16) | CUTS.get(cuts.get(key, ""), 0),
                    f=_ORIGINS.get(origin.get("kind"), Origin.UNKNOWN),
                    ival=int.from_bytes(
                        self._digest("name", node["function"])[:8], "little", signed=True
                    ),
                    digest=self._digest("op", argrepr),
                )
                yield self._value(key, node["value"])
            for child in node["inputs"]:
                # d: the tree expands the input here (its own EDGE frames follow, once).
                yield Frame(Op.EDGE, a=key, b=_key(child), d=1 if child["inputs"] else 0)

    def _stack_frames(self, doc: StackAnswer) -> Iterator[Frame]:
        counter = int(doc["query"]["counter"])
        raised = doc.get("exception")
        if raised is not None:
            # The type name as a VALUE's type digest; the message as a VALUE (a str's digest).
            named = self._digest("type", raised["type"]) if raised["type"] else bytes(8)
            message = raised["message"]
            yield Frame(
                Op.RAISED, a=counter, b=int.from_bytes(named[:8], "big"), e=int(bool(message))
            )
            if message is not None:
                yield self._value(counter, message)
        for number, frame in enumerate(doc["frames"]):
            yield Frame(
                Op.FRAME_AT,
                a=counter,
                c=self._source(frame["file"]),
                d=int(frame["line"]),
                f=number,
                digest=self._digest("name", frame["function"]),
            )
            for local in frame["locals"]:
                yield Frame(
                    Op.LOCAL,
                    a=int(local["tag"]),
                    d=number,
                    digest=self._digest("name", local["name"]),
                )
                yield self._value(int(local["tag"]), local["value"])

    def _flow_frames(self, doc: FlowsAnswer) -> Iterator[Frame]:
        for loc in doc["locations"]:
            yield Frame(
                Op.REACH,
                a=int(loc["counter"]),
                c=self._source(loc["file"]),
                d=int(loc["line"]),
                ival=int(loc["count"]),
                digest=self._digest("name", loc["function"]),
            )
        for out in doc["outputs"]:
            yield Frame(Op.OUTPUT, a=int(out["counter"]), b=int(out["event"]))


def _split_location(where: str | None) -> tuple[str, int]:
    """("path", line) from "path:line"; ("", 0) for none."""
    path, _, line = (where or "").rpartition(":")
    return (path, min(int(line), 10_000_000)) if line.isdigit() else ("", 0)


def _key(node: Node) -> int:
    """A node's counter; an argv or env origin, or a marker, has none, so its tag stands in."""
    counter = int(node["counter"])
    if counter:
        return counter
    if node["op"] == MARKER_OPS["unknown"]:
        return UNKNOWN_TAG
    if node["op"] == MARKER_OPS["cut"]:
        return CUT_TAG
    if node["op"] == MARKER_OPS["window"]:
        return BEFORE_TAG
    kind, _, index = str(node["op"]).partition("[")
    base = {"argv": ARGV_TAG, "env": ENV_TAG}.get(kind)
    return base + int(index.rstrip("]")) if base is not None and index else 0


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node["inputs"]:
        yield from _walk(child)


def _guard_self() -> None:
    """Close /proc/<runner>/fd to the replayed program, which runs as the same user: a
    process that is not dumpable can be inspected only with CAP_SYS_PTRACE, which nothing in
    the sandbox has. And stay the parent of whatever the program leaves behind (as PID 1
    of a container the runner is anyway), so the memory watch sees it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for option in (_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER):
        value = 0 if option == _PR_SET_DUMPABLE else 1
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def main() -> None:
    _guard_self()
    inp = os.open(sys.argv[1], os.O_RDONLY)
    out = os.open(sys.argv[2], os.O_WRONLY)
    # Nothing but frames leaves: the runner's own output and its children's go nowhere.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    runner = Runner(inp, out)
    try:
        runner.serve()
    finally:
        if runner.session is not None:
            runner.session.close()
        os._exit(0)


if __name__ == "__main__":
    main()
