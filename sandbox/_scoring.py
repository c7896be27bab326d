"""A trace judged against its ground truth: precision and recall of the origins it names.

The corpus of `sealtrace validate` (sealtrace.sandbox.validation.corpus) gives each program
a truth (sealtrace.sandbox.validation.truth): the origins the traced value's full backward
slice must name, the real ancestors it may name, and decoys it must not. This module reads
one answer (`trace --json`) against it.

Every origin the answer names (a node whose origin is external, env, argv or constant) gets
one verdict:

    origin               it is one of the truth's origins                      correct
    allowed              a real ancestor the truth allows (a fetch, a literal,  correct
                         or another event of an origin's line: its cursor)
    decoy                a decoy                                                wrong
    unexpected-input     an input the truth does not name: it cannot be real   wrong
    unexpected-constant  a constant in the program's code that is no ancestor:  wrong
                         the empty list a loop filled, a key, a container, an
                         overwritten default, a literal where an input should be
    library-constant     a constant inside a library's code                     not judged

Precision is correct / judged, where judged counts every verdict but the last, plus one for
each decoy that shows up only as an inner step of the slice, plus one when the answer's root
made another value than the one asked about (a wrong root: no ancestor at all). Recall is
the share of the truth's origins the answer names: each event an external origin stands for,
each environment variable, argument and constant. A branch the answer cut (depth) or could not
follow (origin "unknown") names nothing: it costs recall, never precision.

Places are compared as the truth names them: FILE:LINE inside the program (an external
origin's place is the program line that asked for its event, from the recording's sites
pass, sealtrace.sandbox._sites), or argv[N]. Identical origins (the same event, the same
literal at the same line) count once.

A program may also have a forward truth (`flows`): the outputs its value reaches. Each output
a `flows` answer names is one it reaches (correct), one it must avoid, or another (wrong);
flows precision and recall are measured apart from the backward figures.

This module only reads an answer: it never replays anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sealtrace.proxy.format import Event, ParsedStream

from .validation.truth import INPUT_KINDS, Mark

__all__ = [
    "EventFacts",
    "Expected",
    "FlowScore",
    "Named",
    "Placed",
    "Recorded",
    "Score",
    "score",
    "score_flows",
    "unanswered",
]

CORRECT = ("origin", "allowed")
UNJUDGED = ("library-constant",)


@dataclass(frozen=True)
class EventFacts:
    """What the recording says of one event: its callee, whether it raised, its result as
    text, and the program line that asked for it (None: no program frame was running)."""

    callee: str
    raised: bool
    text: str
    site: str | None
    written: str | None = None  # an output's bytes, as text


@dataclass(frozen=True)
class Recorded:
    """The recording's inputs as the truth names them. `root` is the program's directory as
    it was recorded; places inside it are shown relative to it."""

    root: str
    events: Sequence[EventFacts]
    env_sites: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def from_recording(cls, parsed: ParsedStream, sites: Mapping[str, Any], root: str) -> Recorded:
        """From a recording and its sites pass (sealtrace.sandbox._sites)."""
        prefix = root.rstrip("/") + "/"
        where = sites.get("events") or {}

        def relative(place: str | None) -> str | None:
            if place is None:
                return None
            return place[len(prefix) :] if place.startswith(prefix) else place

        events = [
            EventFacts(
                callee=e.callee,
                raised=e.raised,
                text=_text(parsed, e),
                site=relative(where.get(str(e.index))),
                written=None if e.data is None else e.data.decode("utf-8", "replace"),
            )
            for e in parsed.events
        ]
        env = {
            str(name): [p for p in (relative(s) for s in places) if p is not None]
            for name, places in (sites.get("env") or {}).items()
        }
        return cls(root, events, env)

    def place(self, file: str, line: int) -> str:
        prefix = self.root.rstrip("/") + "/"
        if file.startswith(prefix):
            return f"{file[len(prefix) :]}:{line}"
        return f"{file}:{line}"

    def inside(self, file: str) -> bool:
        return file.startswith(self.root.rstrip("/") + "/")

    def events_at(self, where: str, mark: Mark) -> list[int]:
        """The events an external mark stands for: asked for at `where`, not raised, showing
        its value and made by its call. For an output mark: the writes made at `where`
        whose bytes show its value."""
        if mark.kind == "output":
            return [
                i
                for i, e in enumerate(self.events)
                if e.site == where
                and e.written is not None
                and (mark.value is None or mark.value in e.written)
            ]
        return [
            i
            for i, e in enumerate(self.events)
            if e.site == where
            and not e.raised
            and (mark.value is None or mark.value in e.text)
            and (mark.call is None or mark.call in e.callee)
        ]


@dataclass(frozen=True)
class Placed:
    """A mark of the truth with its role (origin, allow, decoy) and where it is: FILE:LINE
    inside the program, or argv[N] (sealtrace.sandbox.validation.truth.resolve)."""

    role: str
    mark: Mark
    where: str


@dataclass(frozen=True)
class Named:
    """One origin the answer names, and its verdict."""

    kind: str
    where: str
    event: int | None
    value: str | None
    verdict: str
    mark: str | None = None

    @property
    def judged(self) -> bool:
        return self.verdict not in UNJUDGED

    @property
    def correct(self) -> bool:
        return self.verdict in CORRECT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Expected:
    """One item of recall: a truth origin (for an external one, one of its events)."""

    kind: str
    mark: str
    where: str
    event: int | None
    value: str | None
    named: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Score:
    named: list[Named] = field(default_factory=list)
    expected: list[Expected] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)  # decoys seen only as inner steps
    unknown: int = 0  # origins the answer could not know
    cut: int = 0  # steps left unexpanded (the depth bound)
    # The answer's root made another value than the one asked about: it is no ancestor.
    wrong_root: str | None = None

    @property
    def correct(self) -> int:
        return sum(n.correct for n in self.named)

    @property
    def judged(self) -> int:
        wrong_root = 1 if self.wrong_root is not None else 0
        return sum(n.judged for n in self.named) + len(self.leaked) + wrong_root

    @property
    def found(self) -> int:
        return sum(e.named for e in self.expected)

    @property
    def precision(self) -> float | None:
        return self.correct / self.judged if self.judged else None

    @property
    def recall(self) -> float | None:
        return self.found / len(self.expected) if self.expected else None

    @property
    def inputs_named(self) -> list[Named]:
        return [n for n in self.named if n.kind in INPUT_KINDS]

    def to_json(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "correct": self.correct,
            "judged": self.judged,
            "found": self.found,
            "expected": [e.to_json() for e in self.expected],
            "named": [n.to_json() for n in self.named],
            "decoys_inside": self.leaked,
            "wrong_root": self.wrong_root,
            "unknown": self.unknown,
            "cut": self.cut,
        }


@dataclass(frozen=True)
class _Node:
    """A node of the answer as the scoring sees it."""

    kind: str | None  # its origin's kind, None for a computation
    places: frozenset[str]
    inside: bool  # made by the program's own code (not a library's)
    event: int | None
    argv: int | None
    value: str | None  # the step's value, shown
    text: str  # what a value filter searches: the event's result, else the value
    call: str | None


def score(answer: Mapping[str, Any], truth: Sequence[Placed], rec: Recorded) -> Score:
    """Judge `answer` (trace --json) against the placed marks of a truth."""
    nodes, edges = _graph(answer["root"])
    origins = [p for p in truth if p.role == "origin"]
    allowed = [p for p in truth if p.role == "allow"]
    decoys = [p for p in truth if p.role == "decoy"]
    result = Score()
    seen: dict[tuple[Any, ...], Named] = {}
    inner: list[str] = []
    views = {key: _view(node, rec) for key, node in nodes.items()}
    for key, view in views.items():
        if view.kind == "unknown":
            result.unknown += 1
        elif view.kind is None:
            if not edges[key]:
                result.cut += 1
            for p in decoys:
                if _at(view, p) and p.mark.name not in inner:
                    inner.append(p.mark.name)
        else:
            identity = _identity(view, key)
            if identity not in seen:
                seen[identity] = _judge(view, origins, allowed, decoys, rec)
    result.named = sorted(seen.values(), key=lambda n: (n.verdict, n.where, n.event or 0))
    named_decoys = {n.mark for n in result.named if n.verdict == "decoy"}
    result.leaked = [name for name in inner if name not in named_decoys]
    result.expected = _expected(origins, rec, list(views.values()))
    result.wrong_root = _wrong_root(answer, rec)
    return result


def _wrong_root(answer: Mapping[str, Any], rec: Recorded) -> str | None:
    """The root of an answer is the step that made the value asked about: when both values
    can be shown and differ, the root is some other step."""
    asked = ((answer.get("query") or {}).get("value") or {}).get("repr")
    root = answer["root"]
    made = (root.get("value") or {}).get("repr")
    if asked is None or made is None or asked == made:
        return None
    view = _view(root, rec)
    return f"step {root['counter']} {root['op']} at {_shown(view)} made {made}, not {asked}"


@dataclass
class FlowScore:
    """A `flows` answer against a forward truth: the outputs it says the value reached."""

    reached: list[tuple[int, str]] = field(default_factory=list)  # (event, verdict)
    expected: list[tuple[int, bool]] = field(default_factory=list)  # (event, named)

    @property
    def correct(self) -> int:
        return sum(verdict == "reaches" for _, verdict in self.reached)

    @property
    def named(self) -> int:
        return len(self.reached)

    @property
    def found(self) -> int:
        return sum(named for _, named in self.expected)

    @property
    def precision(self) -> float | None:
        return self.correct / self.named if self.named else None

    @property
    def recall(self) -> float | None:
        return self.found / len(self.expected) if self.expected else None

    def to_json(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "reached": [{"event": e, "verdict": v} for e, v in self.reached],
            "expected": [{"event": e, "named": n} for e, n in self.expected],
        }


def score_flows(
    outputs: Sequence[int], reaches: Sequence[Placed], avoids: Sequence[Placed], rec: Recorded
) -> FlowScore:
    """Every output a `flows` answer names is one the value reaches (correct), one it must
    avoid, or another output (both wrong); recall is the share of the outputs it reaches."""
    wanted = {e for p in reaches for e in rec.events_at(p.where, p.mark)}
    avoided = {e for p in avoids for e in rec.events_at(p.where, p.mark)}
    for p in (*reaches, *avoids):
        if not rec.events_at(p.where, p.mark):
            raise ValueError(f"the flow's {p.mark.describe()} names no output at {p.where}")
    result = FlowScore()
    for event in sorted(set(outputs)):
        verdict = "reaches" if event in wanted else "avoids" if event in avoided else "other"
        result.reached.append((event, verdict))
    result.expected = [(e, e in set(outputs)) for e in sorted(wanted)]
    return result


def unanswered(truth: Sequence[Placed], rec: Recorded) -> Score:
    """The score of no answer at all: every origin of the truth missed."""
    return Score(expected=_expected([p for p in truth if p.role == "origin"], rec, []))


def _judge(
    view: _Node,
    origins: Sequence[Placed],
    allowed: Sequence[Placed],
    decoys: Sequence[Placed],
    rec: Recorded,
) -> Named:
    def named(verdict: str, placed: Placed | None = None) -> Named:
        mark = placed.mark.name or placed.where if placed is not None else None
        return Named(str(view.kind), _shown(view), view.event, view.value, verdict, mark)

    for p in decoys:
        if _matches(view, p, rec, decoy=True):
            return named("decoy", p)
    for p in origins:
        if _matches(view, p, rec):
            return named("origin", p)
    for p in allowed:
        if _matches(view, p, rec):
            return named("allowed", p)
    for p in origins:  # another event of an origin's line: how that input was fetched
        if view.kind == "external" == p.mark.kind and p.where in view.places:
            return named("allowed", p)
    if view.kind in INPUT_KINDS:
        return named("unexpected-input")
    return named("unexpected-constant" if view.inside else "library-constant")


def _matches(view: _Node, placed: Placed, rec: Recorded, *, decoy: bool = False) -> bool:
    mark = placed.mark
    if mark.kind == "argv":
        return view.kind == "argv" and view.argv == mark.argv
    if not (decoy and mark.kind == "any") and view.kind != mark.kind:
        return False
    if placed.where not in view.places:
        return False
    if view.kind == "external" and not decoy:
        return view.event in rec.events_at(placed.where, mark)
    if view.kind == "constant" and mark.value is not None:
        return view.value == mark.value
    return _shows(view, mark)


def _at(view: _Node, placed: Placed) -> bool:
    """A step of the slice on a decoy's line (showing its value, when it has one)."""
    return placed.mark.kind != "argv" and placed.where in view.places and _shows(view, placed.mark)


def _shows(view: _Node, mark: Mark) -> bool:
    return mark.value is None or mark.value in view.text or mark.value in (view.value or "")


def _expected(origins: Sequence[Placed], rec: Recorded, views: list[_Node]) -> list[Expected]:
    named_events = {v.event for v in views if v.kind == "external" and v.event is not None}
    out: list[Expected] = []
    for p in origins:
        mark, where = p.mark, p.where
        if mark.kind == "external":
            events = rec.events_at(where, mark)
            if not events:
                raise ValueError(
                    f"the truth's {mark.describe()} names no recorded event at {where}"
                )
            out.extend(
                Expected("external", mark.name, where, e, mark.value, e in named_events)
                for e in events
            )
            continue
        if mark.kind == "env" and not any(where in sites for sites in rec.env_sites.values()):
            raise ValueError(f"the truth's {mark.describe()}: no environment read at {where}")
        hit = any(v.kind == mark.kind and _matches(v, p, rec) for v in views)
        out.append(Expected(mark.kind, mark.name or where, where, None, mark.value, hit))
    return out


def _text(parsed: ParsedStream, event: Event) -> str:
    """An event's recorded result as text a value filter can search."""
    if event.raised:
        return ""
    try:
        value = parsed.decode(event)
    except Exception:  # a value the codec cannot rebuild here shows nothing
        return ""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    try:
        return repr(value)
    except Exception:
        return ""


# -- the answer as a graph --------------------------------------------------------------

Key = tuple[int, str]


def _key(node: Mapping[str, Any]) -> Key:
    return int(node["counter"]), str(node["op"])


def _graph(root: Mapping[str, Any]) -> tuple[dict[Key, Mapping[str, Any]], dict[Key, list[Key]]]:
    """Every step once (a tree repeats a step reached twice, unexpanded), with its inputs."""
    nodes: dict[Key, Mapping[str, Any]] = {}
    edges: dict[Key, list[Key]] = {}
    stack = [root]
    while stack:
        node = stack.pop()
        key = _key(node)
        if key not in nodes or node.get("inputs"):
            nodes[key] = node
        out = edges.setdefault(key, [])
        for child in node.get("inputs") or []:
            if _key(child) not in out:
                out.append(_key(child))
            stack.append(child)
    return nodes, edges


def _view(node: Mapping[str, Any], rec: Recorded) -> _Node:
    origin = node.get("origin") or {}
    kind = origin.get("kind")
    file = str(node.get("file") or "")
    value = (node.get("value") or {}).get("repr")
    op = str(node.get("op") or "")
    places = {rec.place(file, int(node.get("line") or 0))} if file else set()
    inside = bool(file) and rec.inside(file)
    event = origin.get("event")
    text = value or ""
    argv_index = None
    if kind == "argv" and op.startswith("argv[") and op.endswith("]"):
        argv_index = int(op[5:-1])
        places = {op}
    elif kind == "external" and event is not None and 0 <= int(event) < len(rec.events):
        facts = rec.events[int(event)]
        if facts.site is not None:
            places = {facts.site}  # the program line that asked for it
        text = facts.text
    elif kind == "env" and not inside:
        name = _env_name(str(origin.get("call") or ""))
        places.update(rec.env_sites.get(name or "", ()))
    return _Node(
        kind=kind,
        places=frozenset(places),
        inside=inside,
        event=int(event) if event is not None else None,
        argv=argv_index,
        value=value,
        text=text,
        call=origin.get("call"),
    )


def _env_name(call: str) -> str | None:
    # "os.environ['NAME']", as the engine names an environment read
    if call.startswith("os.environ[") and call.endswith("]"):
        inner = call[len("os.environ[") : -1]
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            return inner[1:-1]
    return None


def _identity(view: _Node, key: Key) -> tuple[Any, ...]:
    if view.kind == "external" and view.event is not None:
        return ("external", view.event)
    if view.kind == "argv":
        return ("argv", view.argv)
    if view.kind == "env":
        return ("env", view.call, view.places)
    if view.kind == "constant":
        return ("constant", view.places, view.value)
    return ("node", key)


def _shown(view: _Node) -> str:
    places = sorted(view.places)
    if not places:
        return "?"
    where = places[0]
    for marker in ("/site-packages/", "/lib/python3.11/"):
        if marker in where:
            return where.split(marker, 1)[1]
    return where
