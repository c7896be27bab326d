"""Provenance queries inside the replaying process: the engine attached to a replay.

sealtrace.sandbox._replay starts this when the parent asks a question. One replay answers
one pass of a query (sealtrace.sandbox._inquiry runs as many passes as it needs):

    slice    run to a counter keeping every instruction's input tags, then walk back from
             it: the counters of its backward slice, nearest first
    serve    run to the end taking checkpoints (sealtrace.sandbox._checkpoints), then
             report as survey does; later passes start from those checkpoints
    survey   run to the end; report the instruction count, the last instruction of the
             main module ("end"), where the uncaught exception was raised ("crash") and the
             instruction whose call wrote the last output ("output")
    locate   stop before an instruction (a counter, or FILE:LINE#HIT) and report the frames
             there, with every local's value summary and tag, and the tag of an expression;
             asked to slice, it also keeps every instruction's input tags on the way and walks
             back from that tag (a trace's locate and slice in one pass)
    capture  describe the instructions at a set of counters: operation, location, operand
             values and tags, the value produced, and any external input it returned
    flows    follow a value (a tag, or the result of a recorded event) forward to every
             location that read it and every output it reached

Everything here runs inside engine callbacks with tracing suspended, so it must never run
the program's own code: values are summarised from builtin types only, and attributes are
read without calling properties or __getattr__.
"""

from __future__ import annotations

import dis
import hashlib
import inspect
import os
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any, NoReturn, cast

from sealtrace.proxy.boundary import is_own_code

from ._replay import CONTENT, EMPTY

__all__ = [
    "ARGV_TAG",
    "BEFORE_TAG",
    "CUT_TAG",
    "ENV_TAG",
    "MARKER_OPS",
    "UNKNOWN_TAG",
    "ExpressionError",
    "Provenance",
    "describe_exception",
    "input_tags",
    "marker_node",
    "origin_tag_kind",
    "parse_expression",
    "summarize",
]

# Tags at or above 2**62 are origins with no instruction behind them (the engine spells the
# last two: native/src/py_values.hpp). UNKNOWN_TAG is an input of a value C code made from a
# container holding items the engine has no producer for (put there by code it does not
# trace); CUT_TAG one of a value made from more items than a pass reads.
ARGV_TAG = 1 << 62
ENV_TAG = (1 << 62) | (1 << 40)
FLOW_TAG = (1 << 62) | (1 << 41)
UNKNOWN_TAG = (1 << 62) | (1 << 42)
CUT_TAG = (1 << 62) | (1 << 43)
# A windowed pass (the engine attached partway through the run, at a request's connection):
# an input made before the window opened, or by code the engine does not trace.
BEFORE_TAG = (1 << 62) | (1 << 44)
# A slice pass keeps the input tags of every instruction up to the root: bounded here.
EDGE_LIMIT = 50_000_000
# The root of a locate that slices too (every instruction's inputs kept until it stops).
_NO_ROOT = (1 << 64) - 1
# A serve pass keeps the edges for its checkpoints up to this many input tags: every
# checkpoint may hold its own copy of them (a compaction rewrites them after it forked), so
# past it the pass records no more, and questions from later checkpoints slice from the
# start as a pass of their own (docs/provenance.md#checkpoints).
SERVE_EDGE_LIMIT = 2_000_000
# A checkpoint a slicing question keeps at its stop holds the edges it recorded if they are at
# most this many input tags (about 4 bytes each); larger, it is kept without them (a later
# question from it slices as a pass of its own). The session keeps at most KEPT_WITH_EDGES
# such (sandbox._checkpoints).
KEPT_EDGE_LIMIT = 16_000_000
# ...and packs them every this many edges at least (more often than a slice pass): what is
# not packed yet is what a checkpoint copies as the pass goes on writing it.
SERVE_EDGE_BATCH = 1 << 16
SLICE_NODES = 4_000
_REPR_LIMIT = 200
_ITEMS_LIMIT = 12
_SAFE_SCALARS = (type(None), bool, int, float, complex, str, bytes)
# Specialised opcode names to the instruction they specialise (dis keeps the table).
_DEOPT: dict[str, str] = getattr(dis, "deoptmap", {})


# Statements a program sends to its database: flows name them as outputs a value reached
# when the value is among what the statement was given (its parameters, its text).
_DATABASE_WRITES = ("sqlite3.Cursor.execute", "sqlite3.Connection.execute")

# The node standing for an UNKNOWN_TAG or CUT_TAG input (a trace's NODE, with no counter).
MARKER_OPS = {
    "unknown": "items written by untraced code",
    "cut": "more items, not read",
    "window": "made before the traced window",
}


def marker_node(kind: str) -> dict[str, Any]:
    """The NODE of an "unknown" marker (items the engine has no producer for: its origin is
    unknown) or a "cut" one (items a pass did not read: the branch was cut)."""
    return {
        "counter": 0,
        "file": "",
        "line": 0,
        "function": "",
        "op": MARKER_OPS[kind],
        "value": {"type": "?", "repr": None, "digest": ""},
        "origin": {"kind": kind, "call": None, "event": None} if kind != "cut" else None,
        "inputs": [],
    }


def origin_tag_kind(tag: int) -> tuple[str, int] | None:
    """("argv", index), ("env", index), ("unknown", 0) or ("cut", 0) for an origin tag, else
    None."""
    if tag >= BEFORE_TAG:
        return "window", tag - BEFORE_TAG
    if tag >= CUT_TAG:
        return "cut", tag - CUT_TAG
    if tag >= UNKNOWN_TAG:
        return "unknown", tag - UNKNOWN_TAG
    if tag >= FLOW_TAG:
        return "value", tag - FLOW_TAG
    if tag >= ENV_TAG:
        return "env", tag - ENV_TAG
    if tag >= ARGV_TAG:
        return "argv", tag - ARGV_TAG
    return None


class ExpressionError(ValueError):
    pass


# -- value summaries ------------------------------------------------------------------------


def _fresh(text: str) -> str:
    """A new string equal to `text`. What a pass keeps must not hold the program's objects: a
    name or qualname kept alive here would outlive its code or class in this pass only, and
    the program would allocate differently from then on (sealtrace._engine.quiet)."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


_TYPE_FIELDS = {name: type.__dict__[name] for name in ("__module__", "__qualname__", "__name__")}


def _of_type(t: type, name: str) -> str:
    """A type's __module__, __qualname__ or __name__ as `type` keeps it. Describing a value
    must run none of the program's code: t.__qualname__ would find a metaclass's property of
    that name first."""
    found = _TYPE_FIELDS[name].__get__(t, type)
    return found if type(found) is str else "?"


def _own_type(t: type) -> bool:
    """A replay stand-in (a boundary proxy class): its fields are sealtrace's own state."""
    return any(_of_type(c, "__module__").startswith("sealtrace.") for c in t.__mro__)


def _type_name(value: Any) -> str:
    t = type(value)
    module, qualname = _of_type(t, "__module__"), _of_type(t, "__qualname__")
    if _own_type(t):
        own = module.startswith("sealtrace.")
        return _fresh(qualname) if own else f"{module}.{qualname}"
    if module in ("builtins", "__main__"):
        return _fresh(qualname)
    return f"{module}.{qualname}"


def _instance_dict(value: Any) -> dict[str, Any] | None:
    """The instance's attributes; never gives it a __dict__ it kept inline (reading
    `__dict__` would, and the program would then store its attributes differently)."""
    try:
        from sealtrace._engine import instance_fields
    except ImportError:  # the parent process, summarising only builtin values
        try:
            d = object.__getattribute__(value, "__dict__")
        except (AttributeError, TypeError):
            return None
    else:
        d = instance_fields(value)
    return d if type(d) is dict else None


def _safe_repr(value: Any, depth: int = 0) -> str | None:
    """repr() for values whose repr runs no program code; None for anything else."""
    t = type(value)
    if t in _SAFE_SCALARS:
        try:
            return repr(value)
        except ValueError:  # an int too long for a decimal string (over 4,300 digits)
            return hex(value)
    if _own_type(t):
        return f"<{_type_name(value)}>"
    if depth >= 2:
        return "…"
    if t in (list, tuple, set, frozenset):
        parts = [
            _safe_repr(v, depth + 1) or f"<{_type_name(v)}>" for v in list(value)[:_ITEMS_LIMIT]
        ]
        if len(value) > _ITEMS_LIMIT:
            parts.append("…")
        if t is tuple:
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        if t is list:
            return "[" + ", ".join(parts) + "]"
        name = _of_type(t, "__name__")
        return name + "({" + ", ".join(parts) + "})" if parts else f"{name}()"
    if t is dict:
        items = []
        for k, v in list(value.items())[:_ITEMS_LIMIT]:
            items.append(
                f"{_safe_repr(k, depth + 1) or '<' + _type_name(k) + '>'}: "
                f"{_safe_repr(v, depth + 1) or '<' + _type_name(v) + '>'}"
            )
        if len(value) > _ITEMS_LIMIT:
            items.append("…")
        return "{" + ", ".join(items) + "}"
    # By its type, not isinstance(): that asks an object of another type for its __class__,
    # which a proxy (werkzeug's LocalProxy) computes in the program's code.
    if issubclass(t, (types.FunctionType, types.BuiltinFunctionType)):
        return f"<{_type_name(value)} {value.__qualname__}>"
    if issubclass(t, type):
        return f"<{_type_name(value)} {_of_type(value, '__qualname__')}>"
    module = _of_type(t, "__module__")
    if module == "pathlib":
        return _path_repr(value, t)
    if module == "fractions":
        return _fields_repr(value, t, ("_numerator", "_denominator"), "{}({}, {})")
    if module == "uuid":
        return _fields_repr(value, t, ("int",), "{}('{}')", _uuid_text)
    if module in ("decimal", "datetime"):  # C types: their repr runs no Python
        try:
            return repr(value)
        except Exception:
            return None
    fields = _instance_dict(value)
    if fields is not None and not issubclass(t, types.ModuleType):
        inner = ", ".join(
            f"{k}={_safe_repr(v, depth + 1) or '<' + _type_name(v) + '>'}"
            for k, v in list(fields.items())[:_ITEMS_LIMIT]
            if issubclass(type(k), str)
        )
        return f"{_of_type(t, '__qualname__')}({inner})"
    return None


def _slot(value: Any, t: type, name: str) -> Any:
    """The value in one of t's __slots__, read by its member descriptor (AttributeError when
    it is empty or is not a slot)."""
    found = _class_attr(t, name)
    if type(found) is not types.MemberDescriptorType:
        raise AttributeError(name)
    return found.__get__(value, t)


def _fields_repr(
    value: Any, t: type, slots: tuple[str, ...], form: str, text: Callable[[Any], str] = str
) -> str | None:
    """repr() of a standard-library value, made from its slots: its own repr() is Python, and
    describing a value runs none. None for a value still being built."""
    try:
        fields = [_slot(value, t, name) for name in slots]
    except AttributeError:
        return None
    if any(type(f) is not int for f in fields):
        return None
    return form.format(_of_type(t, "__name__"), *(text(f) for f in fields))


def _uuid_text(number: int) -> str:
    h = f"{number:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _path_repr(value: Any, t: type) -> str | None:
    """repr() of a pathlib path, made from its slots. Its own repr() would store the path's
    string in it (PurePath.__str__ caches it), so the program, asking for that string later,
    would run fewer instructions in a pass that described the path than in one that did not,
    and the two would number the rest of the run differently. None for a path still being
    built."""
    sep = "\\" if issubclass(t, sys.modules["pathlib"].PureWindowsPath) else "/"
    try:
        try:
            text = _slot(value, t, "_str")
        except AttributeError:
            drv, root, parts = (_slot(value, t, n) for n in ("_drv", "_root", "_parts"))
            text = (drv + root + sep.join(parts[1:]) if drv or root else sep.join(parts)) or "."
    except (AttributeError, TypeError):  # being built, or not 3.11's pathlib
        return None
    if type(text) is not str:
        return None
    return f"{_of_type(t, '__name__')}({text.replace(sep, '/')!r})"


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= _REPR_LIMIT:
        return text
    return text[: _REPR_LIMIT - 1] + "…"


# Set for a sandboxed session: the agent's per-session key, so the runner's frames carry
# digests only the agent can match (sealtrace.sandbox.protocol).
DIGEST_KEY: bytes | None = None
_TAGS = {type(None): 1, bool: 2, int: 3, float: 4, str: 5, bytes: 6, list: 7, tuple: 8, dict: 9}


def canonical_bytes(value: Any, shown: str | None) -> bytes:
    if issubclass(type(value), bytes):
        return cast(bytes, value)
    if issubclass(type(value), str):  # str's own encode: a subclass's would be the program's
        return str.encode(value, "utf-8", "surrogatepass")
    return (shown or "").encode("utf-8", "surrogatepass")


def keyed_digest(key: bytes | bytearray | memoryview, type_name: str, canonical: bytes) -> str:
    """A digest only the key's holder can match (the agent keeps its key in a wiped buffer
    and passes a view of it)."""
    return hashlib.blake2b(
        type_name.encode() + b"\0" + canonical, digest_size=32, key=key
    ).hexdigest()


def summarize(value: Any) -> dict[str, Any]:
    """{"type", "repr" (or None when it cannot be shown safely), "digest"}; in a sandboxed
    session also "sandbox": the fixed-field form a frame carries (tag, length, int, float,
    keyed digest)."""
    text = _safe_repr(value)
    type_name = _type_name(value)
    canonical = canonical_bytes(value, text)
    digest = hashlib.blake2b(type_name.encode() + b"\0" + canonical, digest_size=32).hexdigest()
    summary: dict[str, Any] = {"type": type_name, "repr": _clip(text), "digest": digest}
    if DIGEST_KEY is not None:
        tag = _TAGS.get(type(value), 10 if type(value) in (set, frozenset) else 11)
        summary["sandbox"] = {
            "tag": tag,
            "length": len(value) if tag in (5, 6, 7, 8, 9, 10) else 0,
            "int": value + 0 if tag == 3 and -(2**63) <= value < 2**63 else 0,
            "bool": bool(value) if tag == 2 else False,
            "float": value + 0.0 if tag == 4 else 0.0,
            "digest": keyed_digest(DIGEST_KEY, type_name, canonical),
            "type_digest": keyed_digest(DIGEST_KEY, "type", type_name.encode())[:16],
        }
    return summary


# -- expressions ----------------------------------------------------------------------------


def parse_expression(text: str) -> list[tuple[str, Any]]:
    """`order.total_price`, `row[0]`, `resp["total"]` → [("name", "order"), ("attr", ...)]."""
    import ast

    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise ExpressionError(
            f"{text!r} is not a name followed by .attributes and [keys]"
        ) from None
    steps: list[tuple[str, Any]] = []
    while True:
        if isinstance(node, ast.Name):
            steps.append(("name", node.id))
            break
        if isinstance(node, ast.Attribute):
            steps.append(("attr", node.attr))
            node = node.value
        elif isinstance(node, ast.Subscript):
            key = node.slice
            try:
                steps.append(("item", ast.literal_eval(key)))
            except ValueError:
                raise ExpressionError(f"the key in {text!r} must be a literal") from None
            node = node.value
        else:
            raise ExpressionError(f"{text!r} is not a name followed by .attributes and [keys]")
    steps.reverse()
    return steps


_MISSING = object()


_TYPE_DICT = type.__dict__["__dict__"]


def _class_attr(t: type, name: str) -> Any:
    """`name` as the first class in t's method resolution order defines it, or _MISSING."""
    for klass in t.__mro__:
        namespace = _TYPE_DICT.__get__(klass, type)
        if name in namespace:
            return namespace[name]
    return _MISSING


def _static_attr(owner: Any, name: str) -> Any:
    if issubclass(type(owner), types.ModuleType):
        return owner.__dict__.get(name, _MISSING)
    fields = _instance_dict(owner)
    if fields is not None and name in fields:
        return fields[name]
    if issubclass(type(owner), type):
        try:
            found = inspect.getattr_static(owner, name)
        except AttributeError:
            return _MISSING
    else:
        # Its class's. Not through inspect.getattr_static(owner), which reads the instance's
        # __dict__ again and so would make one for an instance that keeps its fields inline.
        found = _class_attr(type(owner), name)
        if found is _MISSING:
            return _MISSING
    kind = type(found)
    if hasattr(kind, "__get__") and not issubclass(kind, (staticmethod, classmethod)):
        if issubclass(kind, (types.FunctionType, types.BuiltinFunctionType)):
            return found
        raise ExpressionError(
            f"{name} is computed by a descriptor (a property?); name the attribute it reads"
        )
    return found


# -- the engine in the replaying process -----------------------------------------------------


class Provenance:
    """Runs one query pass over the replay; `emit(result)` ends the replaying process."""

    def __init__(
        self,
        query: dict[str, Any],
        sink: Callable[[dict[str, Any], int], NoReturn],
        redirect: Callable[[Callable[[dict[str, Any], int], NoReturn]], None] | None = None,
    ) -> None:
        """sink(receipt, exit code) ends the process with an answer; redirect(sink) points the
        replay runtime's own endings (a divergence) at a worker's answer channel."""
        from sealtrace._engine import Engine, quiet

        global DIGEST_KEY
        self.sink = sink
        self.redirect = redirect
        if query.get("digest_key"):
            DIGEST_KEY = bytes.fromhex(query["digest_key"])
        # The engine's own evaluation loop runs the replayed frames; a query may ask for the
        # trace callback, the reference the loop is held to (the same answers, slower).
        self.engine = Engine(is_own_code, eval_loop=not query.get("trace_callback", False))
        # Everything a pass does while the program runs happens in a quiet scope, so passes
        # asking different things run the program identically (engine callbacks are quiet
        # already; these are the replay runtime's hooks).
        self.quiet = quiet
        self.checkpoints: Any = None
        # The engine holds every edge since the run's start (or window) that a live value
        # leads back to: a serve pass asked for them, and a worker forked from its checkpoint
        # that went on recording. A question's pass can then slice from here (see _arm).
        self.edges_from_start = False
        self.slicing = False
        self.stop: dict[str, Any] | None = None  # where the recording stopped, if it did
        self._reset(query)

    def _reset(self, query: dict[str, Any]) -> None:
        self.query = query
        self.kind = query["kind"]
        self._keeper: Any = None  # a locate keeps a checkpoint at its stop with this (_stop)
        self.events_by_counter: dict[int, list[tuple[int, str, int]]] = {}
        self.env_reads: dict[int, str] = {}
        self.outputs: list[dict[str, Any]] = []
        # A flow from a located value: whether its value had, where it was located, the tag
        # the locate found there (None: this pass never came there).
        self.checked: bool | None = None
        self.last_output = 0  # the counter of the instruction whose call wrote the last output
        self.marks = {int(e) for e in query.get("marks", ())}  # events whose counter to note
        # A windowed pass: the engine attaches as the replay serves this event, not at start.
        self.window = int(query["window"]) if query.get("window") is not None else None
        self.marked: dict[int, tuple[int, int]] = {}
        self.nodes: dict[int, dict[str, Any]] = {}
        self.wanted: set[int] = set()
        self._last: tuple[Any, str, Any] | None = None
        self.uncaught: dict[str, Any] | None = None
        self._instructions: dict[int, tuple[Any, dict[int, tuple[str, str, int | None]]]] = {}
        self._armed: tuple[int, Callable[[Any, int], None]] | None = None  # the counter stop

    def emit(self, result: dict[str, Any]) -> NoReturn:
        self.sink({"status": "query", "result": result}, 0)

    def reconfigure(
        self, query: dict[str, Any], sink: Callable[[dict[str, Any], int], NoReturn]
    ) -> None:
        """In a worker forked from a checkpoint: take this question, answer on `sink`."""
        inherited = self.edges_from_start and not self.engine.edges_overflowed
        self._reset(query)
        self.sink = sink
        if self.redirect is not None:
            self.redirect(sink)
        keeper, self.checkpoints = self.checkpoints, None
        self._arm(inherited)
        if query.get("keep") is not None and keeper is not None:
            self._keep_at(keeper, query["keep"])

    def _holds_edges(self) -> bool:
        """Whether a checkpoint taken now holds every edge since the start that a live value
        leads back to (a slice can go on from it): the serve pass's until its edge limit, a
        slicing question's within KEPT_EDGE_LIMIT."""
        engine = self.engine
        limit = SERVE_EDGE_LIMIT if self.kind == "serve" else KEPT_EDGE_LIMIT
        return self.edges_from_start and not engine.edges_overflowed and engine.edge_tags <= limit

    def _keep_at(self, keeper: Any, counter: int | str) -> None:
        """Keep a checkpoint at `counter` on the way (the session asked: a later question
        starts there), unless this pass stops before it; a locate keeps one at its own stop
        ("stop", or its counter), before it answers (with the edges its slice recorded). The
        engine has one counter stop: a pass that stops later at a counter of its own gets that
        stop back once kept."""
        armed = self._armed
        if self.kind == "locate" and (counter == "stop" or (armed and armed[0] == counter)):
            self._keeper = keeper  # _stop keeps it
            return
        if not isinstance(counter, int) or (armed is not None and armed[0] <= counter):
            return

        def kept(frame: Any, now: int) -> None:
            # (In a later question's worker, forked from the kept checkpoint, keep() returns
            # False: that worker has its own stops.)
            if keeper.keep(now) and armed is not None:
                self.engine.stop_at_counter(*armed)

        self.engine.stop_at_counter(counter, kept)

    # The replay runtime reports every event it serves, and every env value it gives out.
    def on_event(self, index: int, callee: str, output: bool, brought: int) -> None:
        with self.quiet():
            engine = self.engine
            if self.window is not None and not engine.attached:
                if index < self.window:
                    return  # fast-forward: nothing is traced before the window
                self._open_window()
            # In every pass: what fills an object is the same in all. An empty read (the end
            # of a file) brings nothing into the object that asked, and a result that is no
            # content (seekable(), tell()) only makes its instruction an origin.
            if output:
                engine.note_output()
            elif brought != EMPTY:
                engine.note_input(content=brought == CONTENT)
            current = engine.current()
            if output and self.kind in ("survey", "serve"):
                self.last_output = current
            if index in self.marks and self.kind in ("survey", "serve"):
                # The instructions run so far, and the one whose call this is (0 for a
                # thread's event before its first traced instruction).
                self.marked.setdefault(index, (engine.counter, current))
            if self.kind == "capture" and current in self.wanted:
                self.events_by_counter.setdefault(current, []).append((index, callee, brought))
            elif self.kind == "flows":
                if self.query.get("event") == index:
                    engine.taint_current()
                if (output or callee.startswith(_DATABASE_WRITES)) and engine.current_tainted():
                    self.outputs.append({"event": index, "call": callee, "counter": current})

    def on_env_read(self, name: str) -> None:
        with self.quiet():
            current = self.engine.current()
            if self.kind == "capture" and current in self.wanted:
                self.env_reads.setdefault(current, _fresh(name))

    def on_start(self) -> None:
        """Just before the program's first instruction: argv is set."""
        with self.quiet():
            for i in range(len(sys.argv)):
                self.engine.seed_item(sys.argv, i, ARGV_TAG + i)
            if self.checkpoints is not None:
                self.checkpoints.start()

    def on_thread(self, starting: bool) -> None:
        """A thread of the program's starts (traced from its first instruction) or ends."""
        with self.quiet():
            if starting:
                self.engine.attach_thread()
            else:
                self.engine.detach_thread()

    def _open_window(self) -> None:
        """Attach now, partway through the run: the calling thread's frames are traced from
        their next instruction, what they hold counts as made before the window, and every
        thread started from now on is traced. Threads already running are not."""
        engine = self.engine
        engine.open_window()
        engine.attach()
        frame: Any = sys._getframe(1)
        while frame is not None:
            if not is_own_code(frame.f_code.co_filename):
                frame.f_trace_lines = False
                frame.f_trace_opcodes = True
            frame = frame.f_back

    def attach(self, main_file: str | None) -> None:
        engine = self.engine
        if main_file:
            engine.set_end_file(main_file)
        if self.kind == "serve":
            from ._checkpoints import CheckpointPolicy, Checkpoints

            policy = CheckpointPolicy(
                int(self.query["interval"]),
                int(self.query["cap"]),
                budget=float(self.query.get("budget", 0.0)),
            )
            self.checkpoints = Checkpoints(
                engine,
                int(self.query["control_fd"]),
                policy,
                self.reconfigure,
                release=tuple(int(fd) for fd in self.query.get("release", ())),
                holds_edges=self._holds_edges,
            )
        self._arm()
        if self.window is None:
            engine.attach()

    def _arm(self, inherited: bool = False) -> None:
        """Set the engine up for this pass's question. `inherited`: the checkpoint this
        worker was forked from holds the edges since the start (edges_from_start)."""
        q = self.query
        engine = self.engine
        edge_limit = int(
            q.get("edge_limit", SERVE_EDGE_LIMIT if self.kind == "serve" else EDGE_LIMIT)
        )
        asked: dict[str, Any] = (q.get("slice") or {}) if self.kind == "locate" else {}
        # A locate that slices records edges from its start, or, asked to go on from the
        # checkpoint's (`inherit`), from the run's start: only where the checkpoint has them.
        keep = bool(asked.get("inherit"))
        self.slicing = bool(asked) and (not keep or inherited)
        self.edges_from_start = False
        # The deepest slice any question of the inquiry walks (its "depth_bound"): the edges
        # further back than that from every live value are dropped as the pass goes
        # (Engine.record_edges; 0, none said: every edge a live value leads back to is kept).
        bound = int(q.get("depth_bound", 0))
        if self.slicing:
            engine.record_edges(_NO_ROOT, edge_limit, None, keep, depth=bound)
            self.edges_from_start = keep
        elif self.kind == "serve" and q.get("edges"):
            engine.record_edges(_NO_ROOT, edge_limit, None, batch=SERVE_EDGE_BATCH, depth=bound)
            self.edges_from_start = True
        elif self.kind != "slice":
            engine.record_edges(0, 0, None)  # (a checkpoint's edges: this pass records none)
        if self.kind == "locate":
            self._stop_at(q["at"], self._stop)
        elif self.kind == "capture":
            self.wanted = {int(c) for c in q["counters"]}
            engine.capture(sorted(self.wanted), self._pre, self._post)
        elif self.kind == "flows" and q.get("tags"):
            engine.taint([int(t) for t in q["tags"]])
            if q.get("check"):
                self._stop_at({"counter": int(q["check"]["counter"])}, self._check_flow)
        elif self.kind == "flows" and q.get("seed"):
            self._stop_at(q["seed"]["at"], self._seed_flow)
        elif self.kind == "slice":
            engine.record_edges(int(q["root"]), edge_limit, self._sliced, depth=bound)

    def _stop_at(self, at: dict[str, Any], callback: Callable[[Any, int], None]) -> None:
        """Stop before a counter, a line's Nth entry or a function's Nth return."""
        engine = self.engine
        if "counter" in at:
            self._armed = (int(at["counter"]), callback)
            engine.stop_at_counter(int(at["counter"]), callback)
        elif "function" in at:
            engine.stop_at_return(at["file"], at["function"], int(at.get("hit", 1)), callback)
        else:
            engine.stop_at_line(at["file"], int(at["line"]), int(at.get("hit", 1)), callback)

    def on_uncaught(self, exc: BaseException) -> None:
        """The program ended by an exception (or sys.exit): what a crash's stack shows."""
        with self.quiet():
            self.uncaught = describe_exception(exc)

    def stopped(self, stop: dict[str, Any]) -> NoReturn:
        """The replay reached the recording's stop point: the run ends there for this pass,
        whose answer says so (survey's "stop": the reason, where, and the events before)."""
        self.stop = stop
        self.finish()

    def finish(self) -> NoReturn:
        """The program ended (or stopped): answer with what this pass found."""
        engine = self.engine
        engine.detach()
        stats = engine.stats()
        result: dict[str, Any] = {"kind": self.kind, "stats": stats}
        if self.checkpoints is not None:
            self.checkpoints.finish()
        if self.kind in ("survey", "serve"):
            result.update(
                instructions=engine.counter,
                end=engine.end_counter,
                crash=engine.crash_counter,
                output=self.last_output,
                marks=[[e, *m] for e, m in sorted(self.marked.items())],
                exception=self.uncaught,
                stop=self.stop,
            )
            if self.checkpoints is not None:  # serve: intervals its time budget passed over
                result["checkpoints_put_off"] = self.checkpoints.skipped
        elif self.kind == "locate":
            result["found"] = False
        elif self.kind == "slice":
            result.update(self._slice(self.query))
        elif self.kind == "capture":
            result["nodes"] = {
                str(c): self._node(c) for c in sorted(self.wanted) if c in self.nodes
            }
        elif self.kind == "flows":
            codes = engine.codes()
            result["locations"] = [
                {
                    "file": codes[code][0],
                    "function": codes[code][1],
                    "line": line,
                    "counter": first,
                    "count": count,
                }
                for code, line, first, count in engine.reached()
            ]
            result["outputs"] = self.outputs
            result["tainted_values"] = engine.tainted_count
            result["checked"] = self.checked
        self.emit(result)

    # -- slice ----------------------------------------------------------------------------

    def _slice(self, q: dict[str, Any]) -> dict[str, Any]:
        """The backward slice `q` asks for (its root, depth or depths and node limit) over the
        edges recorded so far."""
        root, limit = int(q["root"]), int(q.get("max_nodes", SLICE_NODES))
        if q.get("depths"):  # several bounds over the same recorded edges (the depth property)
            slices = {}
            every: dict[int, None] = {}
            for depth in q["depths"]:
                nodes, truncated = self.engine.backward_slice(root, int(depth), limit)
                slices[str(depth)] = {"nodes": nodes, "truncated": truncated}
                every.update((tag, None) for tag, _level in nodes)
            return {"slices": slices, "inputs": self._inputs(list(every))}
        nodes, truncated = self.engine.backward_slice(root, int(q["depth"]), limit)
        return {
            "nodes": nodes,
            "truncated": truncated,
            "inputs": self._inputs([tag for tag, _level in nodes]),
        }

    def _inputs(self, tags: list[int]) -> dict[str, list[int]]:
        """Each step's inputs as the slice read them (a capture must name the same ones:
        Inquiry checks that both passes numbered the run alike)."""
        return {
            str(tag): inputs
            for tag, inputs in zip(tags, self.engine.recorded_inputs(tags), strict=True)
            if inputs is not None
        }

    def _sliced(self) -> None:
        """The root instruction completed: every edge of its backward slice is known."""
        engine = self.engine
        result: dict[str, Any] = {"kind": "slice", **self._slice(self.query)}
        result["stats"] = engine.stats()
        engine.detach()
        self.emit(result)

    # -- locate ---------------------------------------------------------------------------

    def _stop(self, frame: Any, counter: int) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None and not keeper.keep(counter):
            return  # a later question's worker, forked from the checkpoint kept here
        engine = self.engine
        frames: list[dict[str, Any]] = []
        f = frame
        while f is not None:
            filename = f.f_code.co_filename
            if is_own_code(filename) and frames:
                break  # below the program: sealtrace's replay machinery
            if not is_own_code(filename) and not filename.startswith("<frozen "):
                frames.append(
                    {
                        "file": filename,
                        "line": f.f_lineno,
                        "function": f.f_code.co_qualname,
                        "locals": [
                            {"name": name, "value": summarize(value), "tag": tag}
                            for name, value, tag in engine.frame_locals(f)
                        ],
                    }
                )
            f = f.f_back
        result: dict[str, Any] = {
            "kind": "locate",
            "found": True,
            "counter": counter,
            "frames": frames,
        }
        expr = self.query.get("expr")
        if expr:
            try:
                value, tag, path = self._evaluate(frame, expr)
                result["value"] = {"summary": summarize(value), "tag": tag, "via": path}
                # Not where the checkpoint had no edges to go on from (not slicing), nor where
                # the edge limit cut the recording short: the inquiry asks a slice pass of its
                # own then (it stops at the root), for the same answer as ever.
                sliced = self.slicing and tag and origin_tag_kind(tag) is None
                if sliced and not engine.edges_overflowed:
                    result["slice"] = self._slice({**self.query["slice"], "root": tag})
            except ExpressionError as exc:
                result["error"] = str(exc)
        result["stats"] = engine.stats()
        engine.detach()
        self.emit(result)

    def _check_flow(self, frame: Any, counter: int) -> None:
        """Where the value was located: does it carry the tag the locate found? A pass that
        numbered the run otherwise would follow another value from that tag."""
        check = self.query["check"]
        try:
            _value, tag, _via = self._evaluate(frame, check["expr"])
        except Exception:  # the program's state, not ours: any failure is a "no"
            tag = None
        self.checked = tag == int(check["tag"])

    def _seed_flow(self, frame: Any, counter: int) -> None:
        """A value whose slot has no producer of its own (an item json.loads made): follow
        that slot's value from here on, not everything its container touches."""
        engine = self.engine
        value, tag, _via = self._evaluate(frame, self.query["seed"]["expr"])
        seeded = False
        if self._last is not None:
            owner, kind, key = self._last
            if kind == "attr":
                seeded = engine.seed_attr(owner, key, value, FLOW_TAG)
            else:
                seeded = engine.seed_item(owner, key, FLOW_TAG)
        elif len(parse_expression(self.query["seed"]["expr"])) == 1:
            # A variable: values unpacked together share a tag; follow this one alone.
            seeded = engine.seed_local(frame, self.query["seed"]["expr"], FLOW_TAG)
        engine.taint([FLOW_TAG] if seeded else [tag])

    def _evaluate(self, frame: Any, expr: str) -> tuple[Any, int, str]:
        """The value of `expr` in `frame`, the tag of its slot, and which slot gave the tag.
        Leaves the last (owner, "attr"|"item", key) step in self._last."""
        self._last = None
        engine = self.engine
        steps = parse_expression(expr)
        kind, name = steps[0]
        value: Any = _MISSING
        tag = 0
        for local, v, t in engine.frame_locals(frame):
            if local == name:
                value, tag = v, t
        if value is _MISSING:
            globals_ = frame.f_globals
            if name in globals_:
                value = globals_[name]
                tag = engine.item_tag(globals_, name, value)
            elif type(frame.f_builtins) is dict and name in frame.f_builtins:
                value = frame.f_builtins[name]
            else:
                raise ExpressionError(f"{name} is not defined at this point")
        via = name
        text = name
        for kind, key in steps[1:]:
            owner, owner_tag = value, tag
            if kind == "attr":
                value = _static_attr(owner, key)
                if value is _MISSING:
                    raise ExpressionError(f"{text} has no attribute {key}")
                tag = engine.attr_tag(owner, key, value)
                text += f".{key}"
            else:
                if type(owner) not in (list, tuple, dict):
                    raise ExpressionError(
                        f"{text} is a {_type_name(owner)}; [key] reads lists, tuples and dicts"
                    )
                try:
                    value = owner[key]
                except (KeyError, IndexError, TypeError):
                    raise ExpressionError(f"{text} has no item {key!r}") from None
                tag = engine.item_tag(owner, key, value)
                text += f"[{key!r}]"
            self._last = (owner, kind, key)
            if tag:
                via = text
            else:
                tag = owner_tag  # the slot was filled by untraced code: the container made it
        return value, tag, via

    # -- capture --------------------------------------------------------------------------

    def _instruction(self, code: Any, index: int) -> tuple[str, str, int | None] | None:
        """(opname, argrepr, line) of the instruction at `index`, de-specialised. Read from
        the code's adaptive copy: `co_code` would be cached on the program's code object (a
        later read by the program would then allocate nothing); and nothing of the code is
        kept (it would outlive what the program frees)."""
        known = self._instructions.get(id(code))
        if known is None or known[0]() is not code:
            table = {
                i.offset: (
                    _DEOPT.get(i.opname, i.opname),
                    _fresh(i.argrepr),
                    i.positions.lineno if i.positions else None,
                )
                for i in dis.get_instructions(code, adaptive=True)
            }
            known = (weakref.ref(code), table)
            self._instructions[id(code)] = known
        table = known[1]
        offset = index * 2
        while offset in table and table[offset][0] == "EXTENDED_ARG":
            offset += 2
        return table.get(offset)

    def _pre(self, frame: Any, counter: int, index: int, inputs: list[tuple[Any, int]]) -> None:
        code = frame.f_code
        ins = self._instruction(code, index)
        opname, argrepr, line = ins if ins is not None else ("?", "", None)
        operation = f"{opname} {argrepr}" if argrepr else opname
        operands = list(inputs)
        if opname in ("CALL", "CALL_FUNCTION_EX") and len(operands) >= 2:
            head, callable_ = operands[0][0], operands[1][0]
            target = head if head is not None else callable_
            operation = f"{opname} {_callable_name(target)}"
            # A method call keeps self as an operand; the callable itself is the operation.
            operands = operands[1:] if head is not None else operands[2:]
        elif opname == "LOAD_METHOD":
            operands = operands[:1]
        names = {(id(v), t): n for n, v, t in self.engine.frame_locals(frame) if t}
        self.nodes[counter] = {
            "counter": counter,
            "file": _fresh(code.co_filename),
            "line": line or frame.f_lineno,
            "function": _fresh(code.co_qualname),
            "op": operation,
            "opname": opname,
            "operands": [
                {"value": summarize(v), "tag": t, "name": _fresh_or_none(names.get((id(v), t)))}
                for v, t in operands
                if v is not None or t
            ],
            "builtin": False,
            "value": None,
            "edges": None,
        }

    def _post(
        self,
        counter: int,
        outputs: list[tuple[Any, int]],
        raised: bool,
        edges: Any,
        move: bool = False,
    ) -> None:
        """`edges`: every input the engine records for the instruction (its operands, values
        handed back to C while it ran, items C read out of containers), or None for a return
        or a yield seen leaving the frame. `move`: the value is one of its inputs read or
        copied, not computed (it costs a trace no depth)."""
        node = self.nodes.get(counter)
        if node is None:
            return
        chosen = None
        for value, tag in outputs:
            if tag == counter:
                chosen = value
        if chosen is None and outputs:
            chosen = outputs[-1][0]
        if outputs:
            node["value"] = summarize(chosen)
            if node["opname"] in ("LOAD_GLOBAL", "LOAD_NAME") and _builtin_module(chosen):
                node["builtin"] = True
        node["raised"] = bool(raised)
        if edges is not None:
            node["edges"] = [int(t) for t in edges]
        node["move"] = bool(move)
        if len(self.nodes) == len(self.wanted) and all(
            n["value"] is not None or n.get("raised") for n in self.nodes.values()
        ):
            self.finish()

    def _node(self, counter: int) -> dict[str, Any]:
        node = dict(self.nodes[counter])
        events = self.events_by_counter.get(counter)
        if events:
            # One call that served several events (readlines: the data, then the empty read
            # that ends it) took its data from the last that brought any.
            carried = [e for e in events if e[2] == CONTENT] or [e for e in events if e[2]]
            index, callee, _brought = (carried or events)[-1]
            kind = "env" if callee.startswith("os.environ") else "external"
            node["origin"] = {"kind": kind, "call": callee, "event": index}
            if node["opname"] in ("CALL", "CALL_FUNCTION_EX"):
                node["op"] = f"{node['opname']} {callee}"  # not the replay stand-in's name
        elif counter in self.env_reads:
            node["origin"] = {
                "kind": "env",
                "call": f"os.environ[{self.env_reads[counter]!r}]",
                "event": None,
            }
        elif node["opname"] == "LOAD_CONST" or node.get("builtin") or not input_tags(node):
            # Nothing flowed in: the code alone determines the value.
            node["origin"] = {"kind": "constant", "call": None, "event": None}
        else:
            node["origin"] = None
        return node


def describe_exception(exc: BaseException) -> dict[str, Any]:
    """{"type", "message"} of an exception, made without running the program's code: the
    message is None unless str() is the builtin one over plain arguments."""
    return {"type": _type_name(exc), "message": _message(exc)}


def _message(exc: BaseException) -> dict[str, Any] | None:
    t = type(exc)
    owner = next((c for c in t.__mro__ if "__str__" in _TYPE_DICT.__get__(c, type)), object)
    if _of_type(owner, "__module__") != "builtins":
        return None  # the program's own __str__
    args = BaseException.__dict__["args"].__get__(exc)
    if type(args) is not tuple or any(type(a) not in _SAFE_SCALARS for a in args):
        return None  # str() would format an object of the program's
    if issubclass(t, OSError):
        for name in ("filename", "filename2", "strerror"):
            if type(OSError.__dict__[name].__get__(exc)) not in _SAFE_SCALARS:
                return None
    try:
        return summarize(str(exc))
    except Exception:
        return None


def _fresh_or_none(text: str | None) -> str | None:
    return None if text is None else _fresh(text)


def input_tags(node: dict[str, Any]) -> list[int]:
    """The tags a captured instruction's node has as inputs: what the engine recorded for it,
    else its operands'."""
    edges = node.get("edges")
    tags = edges if edges is not None else [int(o["tag"]) for o in node.get("operands", [])]
    seen: list[int] = []
    for t in tags:
        if t and t not in seen and t != node["counter"]:
            seen.append(t)
    return seen


def _callable_name(obj: Any) -> str:
    # Each by its type and type's own fields: naming a callee runs none of the program's code.
    t = type(obj)
    if issubclass(t, type):
        return _fresh(_of_type(obj, "__qualname__"))
    if issubclass(t, types.MethodType):
        return _callable_name(obj.__func__)
    if issubclass(t, (types.FunctionType, types.BuiltinFunctionType)):
        return _fresh(str(obj.__qualname__))
    if issubclass(t, (types.MethodDescriptorType, types.WrapperDescriptorType)):
        return f"{_of_type(obj.__objclass__, '__qualname__')}.{obj.__name__}"
    return _type_name(obj)


def _builtin_module(value: Any) -> bool:
    """A builtins function or class (a LOAD_GLOBAL of one is marked as such)."""
    t = type(value)
    if issubclass(t, type):
        return _of_type(value, "__module__") == "builtins"
    return issubclass(t, types.BuiltinFunctionType) and value.__module__ == "builtins"


def attach_to_environ(prov: Provenance) -> None:
    """Report every os.environ value the program reads (the known ones are not events)."""
    env_type = type(os.environ)
    original = env_type.__getitem__

    def getitem(self: Any, key: str) -> str:
        value = original(self, key)
        prov.on_env_read(key)
        return value

    env_type.__getitem__ = getitem  # type: ignore[method-assign]
