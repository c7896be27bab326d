"""The agent's side of a sandbox session: start the runner, stream the recording in, ask,
check every frame, and turn frames back into the documented answers.

The runner is reached through a Transport: two FIFOs in an agent-owned directory (the
container bind-mounts it; LocalTransport runs the runner as a plain child process, for
tests and for machines without Podman). The first frame that breaks the protocol, an
answer past its budget, or silence past the timeout kills the runner and raises
SandboxError (exit 5); nothing the runner sent is trusted further.

The session's digest key lives in a `Secret` read straight from /dev/urandom, is sent in the
LOAD frame written from a buffer that is wiped after the write, and is wiped when the client
closes. (The runner holds it as bytes for the session: the replayed program shares its
process and could read it anyway; docs/protocol.md bounds what it could do with it.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol, cast

from sealtrace.proxy.format import CodecError, ParsedStream, Secret
from sealtrace.sandbox import (
    ARGV_TAG,
    ENV_TAG,
    MARKER_OPS,
    DivergenceError,
    QueryError,
    Receipt,
    ReplayEnvironmentError,
    describe_event,
    marker_node,
    origin_tag_kind,
    output_preview,
    process_alive,
)
from sealtrace.sandbox.protocol import (
    CUTS,
    DIGEST_OFFSET,
    FRAME_SIZE,
    NO_SOURCE,
    DivergenceFlags,
    ErrorCode,
    Frame,
    FrameError,
    FrameReader,
    Op,
    Origin,
    ReplayStatus,
    Stop,
    encode,
    request_for,
    source_texts,
    sources_of,
    stop_of,
)
from sealtrace.sandbox.questions import (
    Flows,
    FlowsAnswer,
    InspectStack,
    Question,
    ReceiptAnswer,
    Replay,
    Requests,
    RequestsAnswer,
    Source,
    SourceAnswer,
    StackAnswer,
    Trace,
    TraceAnswer,
    recording_end,
    requests_answer,
    resolve_function,
    source_answer,
)

from ._dictionary import Dictionary
from ._errors import SandboxError
from ._settings import AgentSettings

__all__ = [
    "DEFAULT_MEMORY_LIMIT",
    "BootedSandbox",
    "LocalTransport",
    "SandboxClient",
    "Transport",
    "session_directory",
    "sweep_session_directories",
]

# mkdtemp makes a private (0700, unguessable) directory in it.
_TMPFS = "/dev/shm"  # noqa: S108
# What one session's processes may hold together (the runner kills them all past it).
DEFAULT_MEMORY_LIMIT = 3 << 30
# What one session may carry from the runner, whatever it answers: the bound on the channel
# a replayed program could shape (docs/protocol.md, "What the frames can carry").
MAX_QUESTIONS = 1_000
MAX_SESSION_FRAMES = 2_000_000

_KINDS: dict[int, str] = {
    Origin.EXTERNAL: "external", Origin.CONSTANT: "constant", Origin.ARGV: "argv",
    Origin.ENV: "env", Origin.UNKNOWN: "unknown", Origin.WINDOW: "window",
}  # fmt: skip
_CUT_NAMES: dict[int, str] = {int(value): name for name, value in CUTS.items()}


def _session_base() -> str | None:
    base = AgentSettings().session_dir
    if not base and os.path.isdir(_TMPFS):
        base = _TMPFS
    return base


def session_directory(prefix: str) -> Path:
    """A fresh 0700 directory for one session's FIFOs or settings, on a tmpfs (/dev/shm, or
    SEALTRACE_SESSION_DIR): nothing a session leaves behind outlives the machine. Its name
    carries this process's id, so sweep_session_directories() can tell an orphan."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=_session_base()))


def sweep_session_directories() -> list[str]:
    """Remove the session directories of processes that are gone (an agent killed mid-
    session cannot remove its own); returns their names."""
    base = Path(_session_base() or tempfile.gettempdir())
    removed = []
    for entry in base.glob("sealtrace-*-*-*"):
        pid = entry.name.split("-")[2]
        if entry.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


class Transport(Protocol):
    """Where the runner runs. `directory` holds the FIFOs `in` and `out`."""

    directory: Path
    memory_limit: int  # bytes, for everything the runner starts (0: none)

    def own(self, path: Path) -> None: ...
    def start(self) -> None: ...
    def kill(self) -> None: ...


class LocalTransport:
    """The runner as a child process of the agent (no container)."""

    def __init__(self) -> None:
        self.directory = session_directory("sealtrace-pipes-")
        self.process: subprocess.Popen[bytes] | None = None
        self.argv: list[str] = [sys.executable, "-m", "sealtrace.sandbox.runner"]
        self.memory_limit = DEFAULT_MEMORY_LIMIT

    def own(self, path: Path) -> None:
        pass  # the runner runs as the agent's own user

    def start(self) -> None:
        self.process = subprocess.Popen(
            [*self.argv, str(self.directory / "in"), str(self.directory / "out")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


class BootedSandbox:
    """A runner started and waiting for a recording: its transport is up (the container
    created and started), both FIFOs are open and their names gone, and its HELLO has been
    read. Nothing of any session is in it yet: no recording, no key. An agent boots one while
    it waits for its assignment, so that a session starts at LOAD (SandboxClient takes it
    over); still one runner and one container for one session."""

    def __init__(self, transport: Transport | None = None, *, timeout: float = 120.0) -> None:
        self.transport = transport or LocalTransport()
        self.timeout = timeout
        self.reader = FrameReader(0)  # the recording's sources are counted at LOAD
        self.in_fd: int | None = None
        self.out_fd: int | None = None
        self.taken = False
        fifo_in = self.transport.directory / "in"
        fifo_out = self.transport.directory / "out"
        try:
            for fifo in (fifo_in, fifo_out):
                os.mkfifo(fifo, 0o600)
                self.transport.own(fifo)
            self.transport.start()
            # Opening a FIFO blocks until the other end opens it: the runner is starting.
            self.out_fd = self._open(fifo_out, os.O_RDONLY)
            self.in_fd = self._open(fifo_in, os.O_WRONLY)
            self._expect_hello()
            # Both of the runner's ends are open: the FIFOs' names go, so nothing the
            # replayed program runs can open the channel by path.
            for fifo in (fifo_in, fifo_out):
                fifo.unlink()
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path, flags: int) -> int:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return os.open(path, flags | os.O_NONBLOCK)
            except OSError:
                if time.monotonic() > deadline:
                    raise SandboxError("the runner did not open its pipes in time") from None
                time.sleep(0.01)

    def _expect_hello(self) -> None:
        assert self.out_fd is not None
        deadline = time.monotonic() + self.timeout
        while True:
            ready, _, _ = select.select(
                [self.out_fd], [], [], max(0.0, deadline - time.monotonic())
            )
            if not ready:
                raise SandboxError("sandbox session ended: the runner did not say HELLO in time")
            try:
                data = os.read(self.out_fd, FRAME_SIZE)
            except BlockingIOError:
                continue
            try:
                if not data:
                    raise FrameError("the runner closed its pipe before HELLO")
                frames = self.reader.feed(data)
            except FrameError as exc:
                raise SandboxError(f"sandbox session ended: protocol violation: {exc}") from None
            if frames:
                if [f.op for f in frames] != [Op.HELLO] or self.reader.buffer:
                    raise SandboxError("sandbox session ended: the runner did not say HELLO")
                return

    def take(self) -> tuple[Transport, int, int, FrameReader]:
        """Hand the runner to the one session that will use it (once)."""
        if self.taken or self.in_fd is None or self.out_fd is None:
            raise SandboxError("this sandbox was already taken or has ended")
        self.taken = True
        return self.transport, self.in_fd, self.out_fd, self.reader

    def close(self) -> None:
        """End it unused (an agent that leaves without a session)."""
        if self.taken:
            return
        self.taken = True
        for fd in (self.in_fd, self.out_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.transport.kill()


class SandboxClient:
    """One recording, served by one runner; every answer checked frame by frame: the
    sandboxed `Answerer` of the question contract (sealtrace.sandbox.questions)."""

    def __init__(
        self,
        data: bytes,
        parsed: ParsedStream,
        transport: Transport | None = None,
        *,
        booted: BootedSandbox | None = None,
        timeout: float = 120.0,
        budget: int = 100_000,
        questions: int = MAX_QUESTIONS,
        session_frames: int = MAX_SESSION_FRAMES,
        checkpoint_every: int = 250_000,
        receipt_only: bool = False,
    ) -> None:
        """A receipt-only client replays without the engine and answers only receipts.
        `budget` bounds the frames of one answer, `questions` and `session_frames` the whole
        session: together they bound what the runner can send (docs/protocol.md). `booted`:
        a runner already started and waiting (its transport is used, not `transport`);
        otherwise one is started here."""
        # Run once the client has closed (a Podman service started for it, say).
        self.after_close: list[Callable[[], None]] = []
        self.parsed = parsed
        self.timeout = timeout
        self.key = Secret.random(32)  # the session's digest key: wiped by close()
        self.sources = sources_of(parsed)
        self.dictionary = Dictionary(self.key.view(), parsed)
        self.seq = 0
        self.closed = False
        self.questions_left = questions
        self.frames_left = session_frames
        # Operand names for text output: frames carry none (see Inquiry.last_nodes).
        self.last_nodes: dict[int, dict[str, Any]] = {}
        # Where the last trace stopped following a branch, and why (NODE frames say).
        self.last_cuts: dict[int, str] = {}
        try:
            if booted is None:
                booted = BootedSandbox(transport, timeout=timeout)
            self.transport, self.in_fd, self.out_fd, self.reader = booted.take()
        except BaseException:
            self.closed = True  # nothing of ours started: only the key to wipe
            self.key.wipe()
            raise
        # The runner's HELLO was checked at boot; from here every frame counts against this
        # recording's sources and this client's budget.
        self.reader.sources = len(self.sources)
        self.reader.budget = budget
        try:
            self.loaded = self._ask(
                Frame(
                    Op.LOAD,
                    a=checkpoint_every,
                    b=self.transport.memory_limit,
                    e=int(receipt_only),
                    f=len(data),
                ),
                data,
                digest=self.key,
            )[0]
        except BaseException:
            self.close()
            raise

    # -- wire -----------------------------------------------------------------------------

    def _write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        deadline = time.monotonic() + self.timeout
        while view:
            _, ready, _ = select.select([], [self.in_fd], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self._fail("the runner stopped reading")
            try:
                view = view[os.write(self.in_fd, view[: 1 << 16]) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                self._fail("the runner went away")

    def _frames(self) -> list[Frame]:
        """The frames of one answer, up to DONE or ERROR, each checked."""
        got: list[Frame] = []
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.out_fd], [], [], max(0.0, left))
            if not ready:
                self._fail(f"no frame from the runner for {self.timeout:g}s")
            try:
                data = os.read(self.out_fd, FRAME_SIZE * 256)
            except BlockingIOError:
                continue
            try:
                if not data:
                    self.reader.end()
                    self._fail("the runner closed its pipe mid-answer")
                for frame in self.reader.feed(data):
                    got.append(frame)
                    if frame.op in (Op.DONE, Op.ERROR, Op.BYE, Op.HELLO):
                        return got
            except FrameError as exc:
                self._fail(f"protocol violation: {exc}")

    def _fail(self, why: str) -> NoReturn:
        self.close()
        raise SandboxError(f"sandbox session ended: {why}")

    def _ask(
        self, request: Frame, payload: bytes = b"", *, digest: Secret | None = None
    ) -> list[Frame]:
        """Send `request` (with `digest` in its digest field, written from a buffer wiped
        after the write, when given) and its payload; its answer's frames, checked."""
        if self.closed:
            raise SandboxError("the sandbox session is closed")
        if self.questions_left <= 0:
            self._fail("the session has asked all the questions one session may ask")
        self.questions_left -= 1
        self.seq += 1
        request = dataclasses.replace(request, seq=self.seq)
        self.reader.ask(request.op, request.seq)
        with Secret.copy_of(encode(request)) as frame:
            if digest is not None:
                frame.view()[DIGEST_OFFSET:] = digest.view()
            self._write(frame.view())
        if payload:  # apart: never one copy of the frame and the whole recording together
            self._write(payload)
        frames = self._frames()
        self.frames_left -= len(frames)
        if self.frames_left < 0:
            self._fail("the runner sent more frames than one session may carry")
        last = frames[-1]
        if last.op is Op.ERROR:
            code = ErrorCode(last.e)
            if code is ErrorCode.DIVERGED:
                raise self._diverged(frames)
            if code is ErrorCode.PASSES:
                raise DivergenceError(
                    f"the passes of this question replayed the run differently at step "
                    f"{last.a}; no answer is given rather than a wrong one"
                )
            if code is ErrorCode.ENVIRONMENT:
                raise ReplayEnvironmentError(
                    "the sandbox image cannot replay this recording (its Python, distributions "
                    "or flags differ from the recording's)"
                )
            if code is ErrorCode.CORRUPT:
                raise CodecError("the event stream is corrupt")
            if code is ErrorCode.MEMORY:
                self._fail(
                    "the replay was killed at the sandbox's memory limit "
                    f"({self.transport.memory_limit >> 20} MiB)"
                )
            if code in (ErrorCode.NOT_REACHED, ErrorCode.BAD_EXPRESSION, ErrorCode.NO_PRODUCER):
                raise QueryError(
                    "the sandboxed run cannot answer that: a location it never reached, or "
                    "an expression that names nothing there"
                )
            self._fail(f"the runner reported {code.name}")
        return frames[:-1]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.key.wipe()  # nothing is asked after this: no digest is made or matched
        with contextlib.suppress(OSError):
            if self.reader.asked is None and self.reader.hello and not self.reader.closed:
                self.seq += 1
                self.reader.ask(Op.GOODBYE, self.seq)
                os.write(self.in_fd, encode(Frame(Op.GOODBYE, seq=self.seq)))
        for name in ("in_fd", "out_fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.transport.kill()
        for then in self.after_close:
            then()

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- questions ------------------------------------------------------------------------

    def _request(self, question: Question) -> tuple[Frame, bytes]:
        at = stop_of(question)
        if at is not None and at.function is not None:
            # Refused here with the in-process answer's words, not the runner's error code.
            resolve_function(at, source_texts(self.parsed))
        return request_for(question, self.sources)

    def _ask_question(self, question: Question) -> list[Frame]:
        return self._ask(*self._request(question))

    def trace(self, question: Trace) -> TraceAnswer:
        frames = self._ask_question(question)
        at, expr, depth = question.at, question.var, question.depth
        stop = frames[0]
        query_value = frames[1]
        nodes: dict[int, Frame] = {}
        values: dict[int, Frame] = {}
        inputs: dict[int, list[tuple[int, bool]]] = {}
        order: list[int] = []
        current = None
        for fr in frames[2:]:
            if fr.op is Op.NODE:
                nodes[fr.a] = fr
                order.append(fr.a)
                current = fr.a
            elif fr.op is Op.VALUE and current is not None:
                values[fr.a] = fr
            elif fr.op is Op.EDGE:
                inputs.setdefault(fr.a, []).append((fr.b, fr.d == 1))
        if not order:
            self._fail("a trace without a root")
        # The runner decided the tree (depth, where each step is expanded): rebuild it as sent.
        self.last_cuts = {
            tag: _CUT_NAMES[fr.e & 0xFFFF] for tag, fr in nodes.items() if fr.e & 0xFFFF
        }
        built: set[int] = set()

        def tree(tag: int, expand: bool) -> dict[str, Any]:
            node = self._node(nodes.get(tag), values.get(tag), tag)
            if expand and tag not in built:
                built.add(tag)
                node["inputs"] = [tree(child, there) for child, there in inputs.get(tag, [])]
            return node

        source = self.sources[stop.c] if stop.c != NO_SOURCE else None
        query = {
            "at": at.strip(),
            "var": expr,
            "depth": depth,
            "stopped_at": {
                "counter": stop.a,
                "file": source,
                "line": stop.d,
                "function": self.dictionary.function_at(source, stop.d) if source else None,
            },
            "value": self._value(query_value),
            "slot": expr.strip()[: stop.f],
            "passes": stop.b,
            "truncated": bool(stop.e),
        }
        if stop.ival:
            query["window"] = stop.ival - 1
        ends = recording_end(self.parsed.stop)
        if ends is not None:
            query["recording_end"] = ends
        return cast(TraceAnswer, {"query": query, "root": tree(order[0], True)})

    def _value(self, fr: Frame | None) -> dict[str, Any]:
        if fr is None:
            return {"type": "?", "repr": None, "digest": ""}
        return self.dictionary.value(fr.e, fr.f, fr.ival, fr.fval, fr.digest, fr.b)

    def _node(self, fr: Frame | None, value: Frame | None, tag: int) -> dict[str, Any]:
        if fr is None:
            return {"counter": tag, "file": "", "line": 0, "function": "", "op": "?",
                    "value": self._value(value), "origin": None, "inputs": []}  # fmt: skip
        kind = _KINDS.get(fr.f)
        marker = origin_tag_kind(tag)
        if marker is not None and marker[0] in MARKER_OPS:
            return marker_node(marker[0])
        if tag >= ARGV_TAG:
            name = "env" if tag >= ENV_TAG else "argv"
            seeded: dict[str, Any] = {"kind": name, "call": None, "event": None}
            return {"counter": 0, "file": "", "line": 0, "function": "", "op": f"{name}[{fr.b}]",
                    "value": self._value(value), "origin": seeded, "inputs": []}  # fmt: skip
        source = self.sources[fr.c] if fr.c != NO_SOURCE else ""
        opname = _opname(fr.e >> 16)
        argrepr = self.dictionary.text("op", fr.digest)
        op = opname if argrepr == "" else f"{opname} {argrepr if argrepr is not None else '?'}"
        origin: dict[str, Any] | None = None
        if kind is not None:
            event = None if fr.b == 2**64 - 1 else fr.b
            call: str | None = None
            if (
                kind in ("external", "env")
                and event is not None
                and event < len(self.parsed.events)
            ):
                call = self.parsed.events[event].callee
                op = f"{opname} {call}" if opname.startswith("CALL") else op
            origin = {"kind": kind, "call": call, "event": event}
        return {
            "counter": tag,
            "file": source,
            "line": fr.d,
            "function": self.dictionary.name_by_prefix(fr.ival)
            or (self.dictionary.function_at(source, fr.d) if source else ""),
            "op": op,
            "value": self._value(value),
            "origin": origin,
            "inputs": [],
        }

    def inspect_stack(self, question: InspectStack) -> StackAnswer:
        frames = self._ask_question(question)
        stack: list[dict[str, Any]] = []
        counter = 0
        pending: tuple[str, int] | None = None
        raised: dict[str, Any] | None = None
        message_next = False  # RAISED with e = 1: its message's VALUE comes next
        for fr in frames:
            if fr.op is Op.RAISED:
                counter = fr.a
                raised = {"type": self.dictionary.types.get(f"{fr.b:016x}"), "message": None}
                message_next = fr.e == 1
            elif fr.op is Op.VALUE and message_next and raised is not None:
                raised["message"] = self._value(fr)
                message_next = False
            elif fr.op is Op.FRAME_AT:
                counter = fr.a
                source = self.sources[fr.c] if fr.c != NO_SOURCE else ""
                function = self.dictionary.text("name", fr.digest) or "?"
                stack.append({"file": source, "line": fr.d, "function": function, "locals": []})
            elif fr.op is Op.LOCAL:
                pending = (self.dictionary.text("name", fr.digest) or "?", fr.a)
            elif fr.op is Op.VALUE and pending is not None and stack:
                name, tag = pending
                stack[-1]["locals"].append({"name": name, "value": self._value(fr), "tag": tag})
                pending = None
        answer: dict[str, Any] = {
            "query": {"at": question.at.strip(), "counter": counter},
            "frames": stack,
        }
        if raised is not None:
            answer["exception"] = raised
        return cast(StackAnswer, answer)

    def flows(self, question: Flows) -> FlowsAnswer:
        source = question.source.strip()
        request, text = self._request(question)
        frames = self._ask(request, text)
        locations = []
        outputs = []
        for fr in frames:
            if fr.op is Op.REACH:
                file = self.sources[fr.c] if fr.c != NO_SOURCE else ""
                locations.append(
                    {
                        "file": file,
                        "function": self.dictionary.text("name", fr.digest) or "?",
                        "line": fr.d,
                        "counter": fr.a,
                        "count": fr.ival,
                    }
                )
            elif fr.op is Op.OUTPUT:
                call = self.parsed.events[fr.b].callee if fr.b < len(self.parsed.events) else "?"
                outputs.append({"event": fr.b, "call": call, "counter": fr.a})
        query: dict[str, Any] = {"from": source}
        if request.e == Stop.EVENT:
            callee = (
                self.parsed.events[request.b].callee if request.b < len(self.parsed.events) else "?"
            )
            query["event"] = {"index": request.b, "call": callee}
        else:
            query.update(counter=0, value=None)  # the runner does not say what it found there
        return cast(FlowsAnswer, {"query": query, "locations": locations, "outputs": outputs})

    def source(self, question: Source) -> SourceAnswer:
        """A recorded source file, from the recording this agent decrypted: the runner is
        not asked (a frame could not carry the text), and nothing the replayed program does
        can change what is shown."""
        if self.closed:
            raise SandboxError("the sandbox session is closed")
        return source_answer(question, source_texts(self.parsed))

    def requests(self, question: Requests) -> RequestsAnswer:
        """The request index, from the recording this agent decrypted (the runner is not
        asked: a frame could not carry a path)."""
        if self.closed:
            raise SandboxError("the sandbox session is closed")
        return requests_answer(self.parsed.indexes_requests, self.parsed.request_index())

    def replay(self, question: Replay) -> ReceiptAnswer:
        """Replay once in the sandbox: the same receipt `sealtrace replay` prints, with what
        only the program knows (its output's bytes, a call's arguments, a location outside
        the recorded sources) shown only where it matches the recording."""
        frames = self._ask_question(question)
        by_op = {fr.op: fr for fr in frames}
        receipt = by_op.get(Op.RECEIPT)
        if receipt is None or len(by_op) != len(frames):
            self._fail("a replay answer without exactly one RECEIPT")
        parsed = self.parsed
        if receipt.digest != self.dictionary.digest("stream", parsed.digest.hex()):
            self._fail("the runner replayed another event stream")
        status = ReplayStatus(receipt.e)
        divergence = None
        if status is ReplayStatus.DIVERGED:
            found = by_op.get(Op.DIVERGENCE)
            where = by_op.get(Op.FRAME_AT)
            if found is None or where is None:
                self._fail("a diverged replay without its divergence")
            divergence = self._divergence(found, where)
        recorded_exit = parsed.exit.get("status") if parsed.exit else None
        return cast(
            ReceiptAnswer,
            {
                "status": {
                    ReplayStatus.BIT_EXACT: "bit-exact",
                    ReplayStatus.STOPPED: "stopped",
                    ReplayStatus.DIVERGED: "diverged",
                }[status],
                "run_id": parsed.meta.get("run_id"),
                "events_replayed": receipt.a,
                "events_recorded": receipt.b,
                "outputs_matched": receipt.d,
                "output_bytes": receipt.ival,
                "exit_status": {
                    "recorded": recorded_exit,
                    "replayed": None if receipt.c == NO_SOURCE else receipt.c,
                },
                "stream_digest": parsed.digest.hex(),
                "divergence": divergence,
                "stop": parsed.stop,
                "notes": [n for n in parsed.notes if n.get("detail") not in ("none", "")],
                "seconds": receipt.fval,
            },
        )

    def _diverged(self, frames: list[Frame]) -> DivergenceError:
        """The error of a question whose replay diverged, worded as the in-process one: the
        event, the expected call, the call made and where (sealtrace.sandbox.Receipt)."""
        found = [fr for fr in frames if fr.op in (Op.DIVERGENCE, Op.FRAME_AT)]
        if [fr.op for fr in found] != [Op.DIVERGENCE, Op.FRAME_AT]:
            return DivergenceError("replay diverged in the sandbox before the answer")
        detail = self._divergence(*found)
        message = Receipt({"status": "diverged", "divergence": detail}).message()
        return DivergenceError(
            f"{message}; provenance needs a faithful replay up to the point asked", detail
        )

    def _divergence(self, fr: Frame, where: Frame) -> dict[str, Any]:
        flags = DivergenceFlags(fr.e)
        events = self.parsed.events
        event = (
            events[fr.a] if flags & DivergenceFlags.EXPECTED_EVENT and fr.a < len(events) else None
        )
        if event is not None:
            expected = describe_event(event)
        elif self.parsed.stop is None:
            expected = "the end of the recording"
        else:
            expected = f"the recording's stop point ({self.parsed.stop.get('reason')})"
        call = self.dictionary.name_by_prefix(fr.ival, "call") or "?"
        actual = call
        if flags & DivergenceFlags.ARGUMENTS:
            # The arguments show only when they are the recorded event's own.
            recorded = event.args_digest.hex()[:12] if event is not None else None
            same = recorded is not None and fr.digest == self.dictionary.digest("args", recorded)
            actual = f"{call}(args {recorded if same else '?'})"
        file = (
            self.sources[where.c]
            if where.c != NO_SOURCE
            else self.dictionary.text("path", where.digest)
            or self.dictionary.tree_path(where.digest)
        )
        detail: dict[str, Any] = {
            "event": fr.a,
            "expected": expected,
            "actual": actual,
            "location": f"{file or '?'}:{where.d}",
            "app_location": f"{self.sources[fr.c]}:{fr.d}" if fr.c != NO_SOURCE else None,
        }
        if flags & DivergenceFlags.OUTPUT and event is not None and event.data is not None:
            detail.update(
                offset=fr.b,
                expected_bytes=output_preview(event.data, fr.b),
                actual_bytes=None,  # the program's own output never leaves the sandbox
                expected_length=len(event.data),
                actual_length=fr.f,
            )
        return detail

    def stats(self) -> dict[str, int]:
        fr = self._ask(Frame(Op.ASK_STATS))[0]
        return {"instructions": fr.a, "depth_mismatches": fr.b, "live_frames": fr.d,
                "tracked_slots": fr.ival}  # fmt: skip


def _opname(op: int) -> str:
    import dis

    return dis.opname[op] if 0 < op < len(dis.opname) else "?"
