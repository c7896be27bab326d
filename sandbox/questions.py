"""The question contract: every question anyone may ask about one recording, and every answer,
typed once.

Everything that asks or answers derives from this module: the CLI builds questions from its
options, the server validates request bodies with `parse_question` and publishes
`json_schema()` in its OpenAPI document, the agent hands whatever the server relayed to
`ask()`, the pipe protocol maps each kind to its request frame (`sealtrace.sandbox.protocol`),
and the two answerers — in-process (`sealtrace.sandbox.Inquiry`) and sandboxed
(`sealtrace.agent.SandboxClient`) — both satisfy `Answerer`. Code that merely relays a
question (the server's routes, its relay, the agent's serving loop) never names a field.

A question's JSON form is `{"kind": KIND, FIELD: VALUE, ...}` with the fields of its class
below (a field's JSON name may differ from its Python name: `Flows.source` is `"from"`).
Adding a kind means: a class here (registered in KINDS), an `Answerer` method, the engine's
answer, and its frame mapping. Nothing else changes.

Answers are JSON documents whose shapes are the TypedDicts below; `check_answer` holds a
document against its kind's shape, and `json_schema()` gives both directions as JSON Schema.
This module must stay importable without the engine, the sandbox client or pydantic.
"""

import ast
import dataclasses
import functools
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NotRequired, Protocol, Self, TypedDict, Union

from ._errors import QueryError

__all__ = [
    "DEFAULT_DEPTH",
    "KINDS",
    "SPECIAL_STOPS",
    "Answer",
    "Answerer",
    "At",
    "FlowLocation",
    "FlowOutput",
    "Flows",
    "FlowsAnswer",
    "InspectStack",
    "Node",
    "Origin",
    "Question",
    "Raised",
    "ReceiptAnswer",
    "Replay",
    "RequestEntry",
    "Requests",
    "RequestsAnswer",
    "Source",
    "SourceAnswer",
    "StackAnswer",
    "StackFrame",
    "StackLocal",
    "Trace",
    "TraceAnswer",
    "Value",
    "ask",
    "check_answer",
    "function_names",
    "json_schema",
    "parse_at",
    "parse_from",
    "parse_question",
    "question_json",
    "requests_answer",
    "resolve_function",
    "resolve_source",
    "source_answer",
]

MAX_LOCATION = 1000
MAX_TEXT = 4000  # characters; and in UTF-8 at most MAX_TEXT_BYTES, a request frame's text
MAX_TEXT_BYTES = 4096  # sealtrace.sandbox.protocol.MAX_REQUEST_TEXT
MAX_DEPTH = 64
# A trace follows every branch to its origins unless this many computations lie between: the
# generous default (moves, reads and copies cost nothing).
DEFAULT_DEPTH = MAX_DEPTH


def _text(limit: int, help: str, json_name: str | None = None) -> dict[str, Any]:
    return {"max_length": limit, "help": help, "json": json_name}


def _at() -> Any:
    """Where a question stops the run (a trace's or a stack's `at`)."""
    help = (
        "FILE:LINE[#HIT], return:[FILE:]FUNC[#N], an instruction counter, request:N, crash, "
        "output or end"
    )
    return field(default="crash", metadata=_text(MAX_LOCATION, help))


# -- questions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """Where did this value come from: its backward slice, `depth` computations deep (moves,
    the reads and copies that hand a value on, are not counted)."""

    kind: ClassVar[str] = "trace"
    at: str = _at()
    var: str = field(
        default="", metadata=_text(MAX_TEXT, "a name, then .attributes and [literal keys]")
    )
    depth: int = field(
        default=DEFAULT_DEPTH,
        metadata={"minimum": 1, "maximum": MAX_DEPTH, "help": "computations back to follow"},
    )
    whole_run: bool = field(
        default=False,
        metadata={
            "help": "at request:N, follow the value back through the whole run instead of "
            "from where the request's connection was accepted (a session's answer is "
            "windowed there: what was made before shows as made before the traced window)"
        },
    )


@dataclass(frozen=True)
class Flows:
    """Where did this value go: every location that used it and every output it reached."""

    kind: ClassVar[str] = "flows"
    source: str = field(
        default="",
        metadata=_text(MAX_TEXT, "EXPR@LOCATION, or event:N for a recorded input", "from"),
    )


@dataclass(frozen=True)
class InspectStack:
    """The frames at a point of the run (the crash by default), with every local."""

    kind: ClassVar[str] = "inspect-stack"
    at: str = _at()


@dataclass(frozen=True)
class Replay:
    """Replay the run once, serving and checking every external call: the receipt."""

    kind: ClassVar[str] = "replay"


@dataclass(frozen=True)
class Source:
    """The recorded text of one of the run's source files (a recorded path, or a unique
    suffix of one). Nothing is replayed: the answer is read from the recording itself."""

    kind: ClassVar[str] = "source"
    file: str = field(default="", metadata=_text(MAX_LOCATION, "a recorded source file"))


@dataclass(frozen=True)
class Requests:
    """The run's request index: every HTTP request a server in the run served, in the order
    they began (request N is `--at request:N`). Nothing is replayed: the answer is read from
    the recording itself."""

    kind: ClassVar[str] = "requests"


Question = Trace | Flows | InspectStack | Replay | Source | Requests
KINDS: dict[str, type[Question]] = {
    q.kind: q for q in (Trace, Flows, InspectStack, Replay, Source, Requests)
}
# A source file longer than this is not shown (the answer would carry all of it).
MAX_SOURCE_BYTES = 2 << 20


# -- answers ------------------------------------------------------------------------------


class Value(TypedDict):
    type: str
    repr: str | None  # None where the value cannot be shown (sandboxed: no digest matched)
    digest: str
    # Inside the sandbox only: the fixed fields a VALUE frame carries (never leaves it).
    sandbox: NotRequired[dict[str, Any]]


class Origin(TypedDict):
    kind: str  # external, constant, argv, env, unknown
    call: str | None
    event: int | None


class Node(TypedDict):
    counter: int
    file: str
    line: int
    function: str
    op: str
    value: Value
    origin: Origin | None
    inputs: list["Node"]


class StoppedAt(TypedDict):
    counter: int
    file: str | None
    line: int | None
    function: str | None


class RecordingEnd(TypedDict):
    """Where the recording stops short of the program's end: a process that ended without
    finishing it (incomplete), a run the recorder rotated (it goes on in `continued_in`), or a
    stop the recorder wrote (a pseudo-terminal's fork). `--at end` is this point."""

    events: int | None
    reason: str
    incomplete: bool
    continued_in: str | None


def recording_end(stop: Mapping[str, Any] | None) -> RecordingEnd | None:
    """What an answer says of a recording that stops before the program ends (its STOP
    record, as parsed), or None for one that runs to the end."""
    if not stop:
        return None
    events = stop.get("events")
    following = stop.get("continued_in")
    return {
        "events": events if isinstance(events, int) and not isinstance(events, bool) else None,
        "reason": str(stop.get("reason") or ""),
        "incomplete": stop.get("incomplete") is True,
        "continued_in": following if isinstance(following, str) else None,
    }


class TraceQuery(TypedDict):
    at: str
    var: str
    depth: int
    stopped_at: StoppedAt
    value: Value
    slot: str
    passes: int
    truncated: bool
    # A windowed answer (in-process, `--at request:N`): the event at which the engine began
    # to trace; inputs made before it are "made before the traced window" markers.
    window: NotRequired[int]
    # The recording stops before the program's end (every answer reaches that far only).
    recording_end: NotRequired[RecordingEnd]


class TraceAnswer(TypedDict):
    query: TraceQuery
    root: Node


class FlowEvent(TypedDict):
    index: int
    call: str


# Either the recorded input it started from (`event`), or where the value was found (the
# sandbox does not say what it found there: its `value` is None and `counter` 0). `from` is
# a keyword in Python and a key in JSON, hence the functional form.
FlowsQuery = TypedDict(
    "FlowsQuery",
    {
        "from": str,
        "event": NotRequired[FlowEvent],
        "counter": NotRequired[int],
        "value": NotRequired[Value | None],
    },
)


class FlowLocation(TypedDict):
    file: str
    function: str
    line: int
    counter: int
    count: int


class FlowOutput(TypedDict):
    event: int
    call: str
    counter: int


class FlowsAnswer(TypedDict):
    query: FlowsQuery
    locations: list[FlowLocation]
    outputs: list[FlowOutput]
    tainted_values: NotRequired[int]  # in-process only: no frame carries it


class StackLocal(TypedDict):
    name: str
    value: Value
    tag: int


class StackFrame(TypedDict):
    file: str
    line: int
    function: str
    locals: list[StackLocal]


class StackQuery(TypedDict):
    at: str
    counter: int


class Raised(TypedDict):
    """The exception a crashed run died of. `type` is None where the sandbox could not match
    its name; `message` is None where making it would run the program's own code (its class
    overrides __str__, or an argument is not a plain value)."""

    type: str | None
    message: Value | None


class StackAnswer(TypedDict):
    query: StackQuery
    frames: list[StackFrame]
    exception: NotRequired[Raised]  # at the crash only


class ExitStatus(TypedDict):
    recorded: int | None
    replayed: int | None


class ReceiptAnswer(TypedDict):
    status: str  # bit-exact, diverged, stopped
    run_id: str | None
    events_replayed: int
    events_recorded: int
    outputs_matched: int
    output_bytes: int
    exit_status: ExitStatus
    stream_digest: str
    divergence: dict[str, Any] | None
    stop: dict[str, Any] | None
    notes: list[dict[str, Any]]
    seconds: float


class SourceAnswer(TypedDict):
    file: str  # the recorded path the question's file named
    lines: list[str]  # its text, line by line (line N is lines[N - 1]), without line ends


class RequestEntry(TypedDict):
    number: int  # from 1: `--at request:N`
    method: str
    path: str  # without the query string
    status: int | None  # None: no response line was seen
    started: float  # Unix seconds
    duration: float  # seconds
    first_event: int  # the events it spans (other threads' may lie between)
    last_event: int
    thread: int  # the recorded thread that read its request line
    complete: bool  # False: still open when the recording ended


class RequestsAnswer(TypedDict):
    indexed: bool  # False: an older recorder kept no index
    requests: list[RequestEntry]


Answer = TraceAnswer | FlowsAnswer | StackAnswer | ReceiptAnswer | SourceAnswer | RequestsAnswer
ANSWERS: dict[str, Any] = {
    Requests.kind: RequestsAnswer,
    Trace.kind: TraceAnswer,
    Flows.kind: FlowsAnswer,
    InspectStack.kind: StackAnswer,
    Replay.kind: ReceiptAnswer,
    Source.kind: SourceAnswer,
}


class Answerer(Protocol):
    """Something that answers questions about one recording: the in-process inquiry and the
    sandbox client both are. It has one method per kind, named after the kind (`-` as `_`).
    Closing it ends every process it started."""

    # The steps of the last trace with their operand names, for the text view: frames carry
    # no names, so the sandbox client's is empty and the text shows fewer details.
    last_nodes: dict[int, dict[str, Any]]
    # Where the last trace stopped following a branch and why, by the step's counter (a
    # marker's tag): "depth" (the bound), "limit" (the slice's node or edge limit), "items"
    # (more container items than one pass reads).
    last_cuts: dict[int, str]

    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
    def trace(self, question: Trace) -> TraceAnswer: ...
    def flows(self, question: Flows) -> FlowsAnswer: ...
    def inspect_stack(self, question: InspectStack) -> StackAnswer: ...
    def replay(self, question: Replay) -> ReceiptAnswer: ...
    def source(self, question: Source) -> SourceAnswer: ...
    def requests(self, question: Requests) -> RequestsAnswer: ...
    def close(self) -> None: ...


def ask(answerer: "Answerer", question: Question) -> Answer:
    """The answer to any question, from any answerer: the one dispatch on kind."""
    method: Any = getattr(answerer, question.kind.replace("-", "_"))
    answer: Answer = method(question)
    return answer


# -- the grammar of locations ----------------------------------------------------------------

_AT = re.compile(r"^(?P<file>.+):(?P<line>\d+)(?:#(?P<hit>\d+))?$")
# A function as Python names its code (co_qualname): main, Order.total, outer.<locals>.inner.
_QUALNAME = r"[^\W\d][\w]*|<lambda>|<locals>"
_FUNCTION = re.compile(rf"^(?:{_QUALNAME})(?:\.(?:{_QUALNAME}))*$")
_RETURN = re.compile(r"^return:(?:(?P<file>.+):)?(?P<function>[^:#]*)(?:#(?P<hit>\d+))?$")
# FILE:FUNC without `return:`: a form people try, refused with the one that works.
_FILE_FUNCTION = re.compile(r"^(?P<file>.+):(?P<function>[^\W\d][\w.<>]*)(?:#\d+)?$")
_AT_FORMS = (
    "FILE:LINE[#HIT], return:FUNC[#N], return:FILE:FUNC[#N], a counter, request:N, crash, "
    "output or end"
)
_REQUEST = re.compile(r"^request:(?P<number>\d+)$")
# Where a run stops that its survey names: its crash, where it wrote its last output (before
# the instruction whose call wrote it), its main module's last instruction.
SPECIAL_STOPS = ("crash", "output", "end")


@dataclass(frozen=True)
class At:
    """Where a query stops: before a counter, a line's Nth execution, a function's Nth
    return (`function`: before its RETURN_VALUE, with its frame whole), the call that sent
    the last bytes of the Nth request of the run's request index (`request`), the crash, the
    last output or the end."""

    text: str
    counter: int | None = None
    file: str | None = None
    line: int | None = None
    hit: int = 1
    special: str | None = None
    function: str | None = None
    request: int | None = None


def parse_at(text: str) -> At:
    text = text.strip()
    if text in SPECIAL_STOPS:
        return At(text, special=text)
    if text.isdigit():
        if int(text) < 1:
            raise QueryError("instruction counters start at 1")
        return At(text, counter=int(text))
    if text.startswith("request:"):
        q = _REQUEST.match(text)
        if q is None or int(q["number"]) < 1:
            raise QueryError(
                f"--at {text!r}: expected request:N, N a request's number from `sealtrace "
                "requests` (from 1)"
            )
        return At(text, request=int(q["number"]))
    if text.startswith("return:"):
        r = _RETURN.match(text)
        if r is None or not _FUNCTION.match(r["function"]):
            raise QueryError(
                f"--at {text!r}: expected return:FUNC[#N] or return:FILE:FUNC[#N], FUNC a "
                "function's name as Python spells it (main, Order.total, outer.<locals>.inner)"
            )
        hit = int(r["hit"]) if r["hit"] else 1
        if hit < 1:
            raise QueryError(f"--at {text!r}: returns count from 1")
        return At(text, file=r["file"], hit=hit, function=r["function"])
    m = _AT.match(text)
    if m is None:
        f = _FILE_FUNCTION.match(text)
        if f is not None:
            raise QueryError(
                f"--at {text!r}: FILE:LINE takes a line number; to stop where a function "
                f"returns, write return:{f['file']}:{f['function']} (or return:{f['function']})"
            )
        raise QueryError(f"--at {text!r}: expected {_AT_FORMS}")
    hit = int(m["hit"]) if m["hit"] else 1
    if hit < 1:
        raise QueryError(f"--at {text!r}: hits count from 1")
    return At(text, file=m["file"], line=int(m["line"]), hit=hit)


def function_names(source: bytes) -> list[str]:
    """The qualified names (co_qualname) of the functions a source defines, in order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(prefix + child.name)
                visit(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return names


def resolve_function(at: At, sources: Mapping[str, bytes]) -> tuple[str, str]:
    """(file, qualified name) of the function a return stop names: its qualified name, or
    the last part of exactly one (`inner` for `outer.<locals>.inner`), in the file given
    or in the one recorded source that defines it. `sources` maps recorded paths to their
    text."""
    assert at.function is not None
    files = sorted(sources)
    where = [resolve_source(at.file, files)] if at.file else files
    defined = {path: function_names(sources.get(path, b"")) for path in where}
    found = [(p, n) for p, names in defined.items() for n in names if n == at.function]
    if not found:
        found = [
            (p, n) for p, names in defined.items() for n in names
            if n.rsplit(".", 1)[-1] == at.function
        ]  # fmt: skip
    if len(set(found)) == 1:
        return found[0]
    if found:
        forms = ", ".join(f"return:{p}:{n}" for p, n in sorted(set(found)))
        raise QueryError(f"--at {at.text}: {at.function} names several functions: {forms}")
    place = where[0] if at.file else "the recorded sources"
    known = sorted({n for names in defined.values() for n in names})
    hint = f" (functions: {', '.join(known[:12])}{', …' if len(known) > 12 else ''})"
    hint = hint if known else ""
    raise QueryError(f"--at {at.text}: no function {at.function} in {place}{hint}")


def resolve_source(name: str, files: list[str]) -> str:
    """The recorded file `name` names: itself, or the one recorded path it is a suffix of; an
    absolute path outside the recording (a library file) stands for itself."""
    if name in files:
        return name
    suffix = name.lstrip("./")
    matches = [f for f in files if f == suffix or f.endswith(os.sep + suffix)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise QueryError(f"{name} matches several recorded files: {', '.join(matches)}")
    if os.path.isabs(name):
        return name  # a library or stdlib file: counted as the replay runs it
    raise QueryError(f"{name} is not a recorded source file (recorded: {', '.join(files)})")


def source_answer(question: Source, sources: Mapping[str, bytes]) -> SourceAnswer:
    """What both answerers answer to `question`, from the recording's own sources (path to
    text): the file it names, line by line. A file that is not recorded (a library the
    replay image carries) or too long to show is a QueryError."""
    path = resolve_source(question.file, sorted(sources))
    text = sources.get(path)
    if text is None:
        raise QueryError(f"{question.file} is not a recorded source file (a library file?)")
    if len(text) > MAX_SOURCE_BYTES:
        raise QueryError(f"{path} is longer than {MAX_SOURCE_BYTES >> 20} MiB: not shown")
    return {"file": path, "lines": text.decode("utf-8", "replace").splitlines()}


def requests_answer(indexed: bool, index: list[Any]) -> RequestsAnswer:
    """What both answerers answer to `Requests`, from the recording's request index
    (`ParsedStream.request_index()`, entries with the REQUEST record's fields)."""
    return {
        "indexed": indexed,
        "requests": [
            {
                "number": n,
                "method": r.method,
                "path": r.path,
                "status": r.status,
                "started": r.started,
                "duration": r.duration,
                "first_event": r.first,
                "last_event": r.last,
                "thread": r.thread,
                "complete": r.complete,
            }
            for n, r in enumerate(index, 1)
        ],
    }


def parse_from(source: str) -> tuple[int | None, str, str]:
    """`--from`: (event, "", "") for event:N, or (None, EXPR, LOCATION) for EXPR@LOCATION."""
    source = source.strip()
    if source.startswith("event:"):
        try:
            return int(source.split(":", 1)[1]), "", ""
        except ValueError:
            raise QueryError(f"--from {source!r}: event:N takes an event number") from None
    expr, sep, where = source.rpartition("@")
    if not sep or not expr:
        raise QueryError(f"--from {source!r}: expected EXPR@LOCATION or event:N")
    return None, expr, where


# -- JSON ---------------------------------------------------------------------------------


def _json_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("json") or f.name)


def parse_question(doc: Mapping[str, Any]) -> Question:
    """The question a JSON object asks; QueryError (exit 2, HTTP 422) for anything else:
    an unknown kind, an unknown field, a wrong type, a value out of range."""
    if not isinstance(doc, Mapping):
        raise QueryError("a question is a JSON object")
    kind = doc.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise QueryError(f"unknown question {kind!r} (known: {', '.join(KINDS)})")
    fields = {_json_name(f): f for f in dataclasses.fields(cls)}
    unknown = sorted(set(doc) - set(fields) - {"kind"})
    if unknown:
        raise QueryError(f"{kind}: unknown field(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in doc:
            continue
        value = doc[name]
        if f.type is bool:
            if not isinstance(value, bool):
                raise QueryError(f"{kind}: {name} must be true or false")
        elif f.type is int:
            if not isinstance(value, int) or isinstance(value, bool):
                raise QueryError(f"{kind}: {name} must be an integer")
            low, high = f.metadata.get("minimum"), f.metadata.get("maximum")
            if (low is not None and value < low) or (high is not None and value > high):
                raise QueryError(f"{kind}: {name} must be between {low} and {high}")
        else:
            if not isinstance(value, str):
                raise QueryError(f"{kind}: {name} must be a string")
            if len(value) > f.metadata["max_length"]:
                raise QueryError(f"{kind}: {name} is longer than {f.metadata['max_length']}")
            if len(value.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
                raise QueryError(f"{kind}: {name} is longer than {MAX_TEXT_BYTES} bytes in UTF-8")
        values[f.name] = value
    question: Question = cls(**values)
    return question


def question_json(question: Question) -> dict[str, Any]:
    """The JSON form parse_question reads back."""
    doc: dict[str, Any] = {"kind": question.kind}
    for f in dataclasses.fields(question):
        doc[_json_name(f)] = getattr(question, f.name)
    return doc


def check_answer(kind: str, doc: Any) -> list[str]:
    """Where `doc` departs from its kind's answer shape: missing or unknown keys, wrong
    types (empty when it conforms)."""
    problems: list[str] = []
    _check(ANSWERS[kind], doc, kind, problems)
    return problems


def _check(tp: Any, value: Any, where: str, problems: list[str]) -> None:
    origin = typing.get_origin(tp)
    if tp is Any:
        return
    if origin in (Union, types.UnionType):
        trials: list[list[str]] = []
        for option in typing.get_args(tp):
            found: list[str] = []
            _check(option, value, where, found)
            if not found:
                return
            trials.append(found)
        fewest: list[str] = min(trials, key=len)
        problems.extend(fewest)
        return
    if tp is type(None):
        if value is not None:
            problems.append(f"{where}: expected null")
        return
    if origin is list:
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list")
            return
        for i, item in enumerate(value):
            _check(typing.get_args(tp)[0], item, f"{where}[{i}]", problems)
        return
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            problems.append(f"{where}: expected an object")
        return
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            problems.append(f"{where}: expected an object")
            return
        hints = _hints(tp)
        for key in tp.__required_keys__ - set(value):
            problems.append(f"{where}: missing {key!r}")
        for key in set(value) - set(hints):
            problems.append(f"{where}: unexpected {key!r}")
        for key, item in value.items():
            if key in hints:
                _check(hints[key], item, f"{where}.{key}", problems)
        return
    expected = _PLAIN[tp]
    if not isinstance(value, expected) or (tp is int and isinstance(value, bool)):
        problems.append(f"{where}: expected {tp.__name__}, got {type(value).__name__}")


_PLAIN: dict[Any, type | tuple[type, ...]] = {str: str, int: int, float: (int, float), bool: bool}


@functools.cache
def _hints(tp: Any) -> dict[str, Any]:
    # Once per shape: check_answer visits every node of a trace, on the server's answer path.
    hints = typing.get_type_hints(tp)
    return {k: _strip(v) for k, v in hints.items()}


def _strip(tp: Any) -> Any:
    while typing.get_origin(tp) in (NotRequired, typing.Required):
        tp = typing.get_args(tp)[0]
    return tp


def json_schema() -> dict[str, Any]:
    """Questions and answers as JSON Schema (2020-12): `question` is the union of every
    kind, `answers` maps each kind to its document."""
    defs: dict[str, Any] = {}
    questions = []
    for kind, cls in KINDS.items():
        props: dict[str, Any] = {"kind": {"const": kind}}
        for f in dataclasses.fields(cls):
            meta = f.metadata
            if f.type is bool:
                prop: dict[str, Any] = {"type": "boolean", "default": f.default}
            elif f.type is int:
                prop = {"type": "integer", "default": f.default}
                prop.update(minimum=meta["minimum"], maximum=meta["maximum"])
            else:
                prop = {"type": "string", "default": f.default, "maxLength": meta["max_length"]}
            prop["description"] = meta["help"]
            props[_json_name(f)] = prop
        questions.append(
            {
                "title": cls.__name__,
                "description": (cls.__doc__ or "").strip(),
                "type": "object",
                "properties": props,
                "required": ["kind"],
                "additionalProperties": False,
            }
        )
    answers = {kind: _schema(tp, defs) for kind, tp in ANSWERS.items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "question": {"oneOf": questions},
        "answers": answers,
        "$defs": defs,
    }


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema(t, defs) for t in typing.get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    if origin is list:
        return {"type": "array", "items": _schema(typing.get_args(tp)[0], defs)}
    if origin is dict or tp is dict:
        return {"type": "object"}
    if typing.is_typeddict(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: a recursive shape (Node) refers to itself
            hints = _hints(tp)
            defs[name] = {
                "type": "object",
                "properties": {k: _schema(v, defs) for k, v in hints.items()},
                "required": sorted(tp.__required_keys__),
                "additionalProperties": False,
            }
        return {"$ref": f"#/$defs/{name}"}
    return {"type": {str: "string", int: "integer", float: "number", bool: "boolean"}[tp]}
