"""The engine's own evaluation loop (native/src/eval_loop.cpp) against its two references.

The trace callback engine (Engine(eval_loop=False)) is the reference for the answers: every
opcode case gives the same counters, the same tags at every stop and the same inputs for every
executed instruction under both. Plain CPython is the reference for what the program does:
results, exceptions, their messages and their tracebacks are the same with the loop running
the frames as without any engine.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sealtrace._engine import Engine

from .opcode_cases import CASES, OpcodeCase
from .test_opcodes import _attached, _globals, _own, capture_case, expression_names, run_case

REPO = Path(__file__).resolve().parents[2]
_NOT_LOOPED = ("generator", "coroutine", "async")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_case_answers_the_same_in_both_loops(case: OpcodeCase) -> None:
    loop, reference = run_case(case), run_case(case, eval_loop=False)
    assert loop.counter == reference.counter
    assert reference.stats["loop_frames"] == reference.stats["loop_handoffs"] == 0
    same = {k: v for k, v in loop.stats.items() if not k.startswith("loop_")}
    assert same == {k: v for k, v in reference.stats.items() if not k.startswith("loop_")}
    everything = list(range(1, loop.counter + 1))
    a, b = capture_case(case, everything), capture_case(case, everything, eval_loop=False)
    assert (a.opname, a.inputs, a.callbacks) == (b.opname, b.inputs, b.callbacks)
    for expect in case.expects:
        stop = (expect, expression_names(expect))
        assert run_case(case, stop).tags == run_case(case, stop, eval_loop=False).tags, expect


# Programs made of the instructions the loop tags itself (opcode_cases has every opcode, these
# have them at scale): loops over ranges (small and long ints), names and globals stored and
# loaded, operators on numbers and strings, values held in containers and read back.
QUICK_CASES = [
    OpcodeCase(
        "quick_ranges",
        """
        total = 0
        for i in range(40):
            total += i * 3 % 7
        def f(n):
            acc = []
            for j in range(n):
                acc.append(j * 2 if j % 3 else -j)
            s = 0
            for k in range(2, n, 3):
                s = s + k
            return acc, s
        pair = f(30)
        big = 0
        for b in range(2**62, 2**62 + 6):
            big = b - 2**62 + big
        kept = [10**20 + 1, 10**20 + 2]
        for v in range(3):
            last = kept[v % 2] + v
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_names",
        """
        RATE = 0.2
        label = "order"
        head = f"{label}:{RATE:.2f}/{len(label)!r} {RATE > 0}"
        try:
            shown = f"{label:d}"
        except ValueError:
            shown = f"{RATE!s:>12}|{None}"
        def price(q, unit):
            global label
            base = q * unit
            label = label + ":" + str(q)
            return base - base * RATE if base > 10 else base
        prices = []
        for q in range(1, 12):
            p = price(q, 2.5)
            if p is not None and p != 0:
                prices.append(p)
            del p
        total = sum(prices)
        flag = not total < 0
        inverse = -total, ~len(prices), +total
        text = label * 2 if flag else label
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_items",
        """
        table = {"a": 5, "b": "x", 3: 7}
        row = [1, 2, 3]
        pick = table["a"] + row[1]
        word = table["b"]
        def get(t, k):
            got = t[k]
            return got
        g = get(table, 3)
        h = get(row, -1)
        pair = (word, g)
        first = pair[0]
        missing = None
        try:
            missing = table["nope"]
        except KeyError:
            missing = row[0]
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_methods",
        """
        class Meter:
            def __init__(self, base):
                self.base = base
            def read(self, k):
                return self.base + k
        meter = Meter(3)
        read = meter.read
        out = []
        for i in range(12):
            out.append(read(i))
            got = meter.read(i)
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_loops",
        """
        rows = [{"id": n, "tags": ("a", n)} for n in range(5)]
        total = 0
        for row in rows:
            total += row["id"]
            for t in row["tags"]:
                last = t
        table = {"x": [1, 2], "y": [3], "z": []}
        for k in table:
            first = k
        for vals in table.values():
            for v in vals:
                total = total + v
        for k, vals in table.items():
            pair = (k, len(vals))
        for n in sorted(table):
            picked = table[n]
        for word in ("p", "q"):
            end = word
        try:
            for k in table:
                table["w" + k] = 0
        except RuntimeError:
            broke = k
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_puts",
        """
        scores = {}
        grid = [0, 0, 0]
        for n in range(6):
            scores["s" + str(n % 3)] = n * 2
            scores[n] = grid
            grid[n % 3] = n
            grid[-1] = scores["s0"]
        squares = [n * n for n in range(5) if n != 2]
        index = {str(n): n + 1 for n in (1, 2, 1)}
        nested = {k: [v, k] for k, v in index.items()}
        again = grid[0] + squares[-1] + index["1"]
        try:
            grid[7] = 1
        except IndexError:
            grid[0] = again
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_attributes",
        """
        class Vec:
            def __init__(self, x, y):
                self.x = x
                self.y = y
            def shifted(self, dx):
                return Vec(self.x + dx, self.y)
        class Tagged(Vec):
            kind = "tagged"
            def label(self):
                return self.kind + str(self.x)
        v = Vec(1, [2, 3])
        for i in range(6):
            v = v.shifted(i)
            v.x = v.x * 2
        t = Tagged(v.x, v.y)
        t.label = lambda: "own"
        name = t.label()
        v.measure = len
        size = v.measure(v.y)
        t.__dict__["z"] = v.x + 1
        z = t.z
        vars(v)["x"] = 40
        far = v.x + t.z
        ys = v.y
        first = t.y[0]
        t.y = None
        del t.x
        try:
            gone = t.x
        except AttributeError:
            gone = t.kind
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_calls",
        """
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        def same(v):
            return v
        def pair(a, b):
            return [b, a]
        def scaled(v, k=3):
            return v * k
        def only(*, k):
            return k
        def spread(*vs):
            return vs[-1]
        def fails(v):
            return v["missing"]
        def counting():
            yield 1
        def outer(base):
            def inner(step):
                return base + step
            return inner
        def keeps(cell):
            return lambda: cell
        class Box:
            def __init__(self, v):
                self.v = v
            def get(self):
                return self.v
            def put(self, v):
                self.v = v
                return self
        top = fib(7)
        row = {"id": 4, "tags": ["a"]}
        got = same(row)
        tags = same(row["tags"])
        both = pair(top, got)
        deep = same(same(pair(row["id"], tags)))
        sized = scaled(2) + scaled(2, 5) + only(k=top) + spread(1, top)
        try:
            fails(row)
        except KeyError:
            caught = same(top)
        made = list(counting())
        add = outer(top)
        step = add(row["id"])
        held = keeps(row)()
        box = Box(row).put(top)
        back = box.get()
        method = box.get
        bound = method()
        ordered = sorted([3, 1, 2], key=same)
        squares = [same(n) * n for n in range(4)]
        """,
        frozenset(),
        (),
    ),
    OpcodeCase(
        "quick_classes",
        """
        import abc
        registry = []
        class Point:
            def __init__(self, x, y):
                self.x = x
                self.y = y
            def moved(self, dx):
                return Point(self.x + dx, self.y)
        class Kept:
            def __init__(self, label):
                self.label = label
                registry.append(self)
        class Held:
            def __init__(self, into):
                into["me"] = [dict(me=self)["me"]]  # held, under a tag of its own
        class Child(Point):
            def norm(self):
                return self.x + self.y
        class Slotted:
            __slots__ = ("v",)
            def __init__(self, v):
                self.v = v
        class Calls:
            def __init__(self, row, k=2):
                self.total = row["n"] * k
                self.point = Point(self.total, row)
        class Refuses:
            def __init__(self, v):
                raise ValueError(v)
        class Returns:
            def __init__(self, v):
                return v
        class Made:
            def __new__(cls, v):
                return super().__new__(cls)
            def __init__(self, v):
                self.v = v
        class Meta(type):
            def __call__(cls, *args):
                return super().__call__(*args)
        class ByMeta(metaclass=Meta):
            def __init__(self, v):
                self.v = v
        class Abstract(abc.ABC):
            @abc.abstractmethod
            def run(self):
                pass
            def __init__(self, v):
                self.v = v
        class Dying:
            def __init__(self, v):
                self.v = v
            def __del__(self):
                registry.append(self.v)
        class Empty:
            def __init__(self):
                self.n = 0
        a = 0
        b = 0
        p = Point(a, b)
        q = Point(a, a)
        row = {"n": 7}
        for i in range(4):
            p = p.moved(i)
            c = Child(p.x, row)
        k = Kept(row["n"])
        h = {}
        for i in range(2):
            held = Held(h)
        s = Slotted(p)
        both = Calls(row)
        also = Calls(row, 3)
        try:
            Refuses(row)
        except ValueError as e:
            refused = e.args[0]
        try:
            Returns(row)
        except TypeError:
            returned = row
        m = Made(row)
        bm = ByMeta(row)
        try:
            Abstract(row)
        except TypeError:
            abstract = row
        for i in range(3):
            d = Dying(i)
        del d  # its __del__ now, not when a later run's collection finds this namespace
        e = Empty()
        total = p.x + s.v.x + both.point.x + c.y["n"]
        """,
        frozenset(),
        (),
    ),
]
QUICK_CASES.append(
    OpcodeCase(
        "quick_c_calls",
        """
        import abc
        class Named:
            def __init__(self, name):
                self.name = name
            def __str__(self):
                return self.name
            def __repr__(self):
                return "Named(" + self.name + ")"
            def __len__(self):
                return len(self.name)
            def __hash__(self):
                return hash(self.name)
        class Shape(abc.ABC):
            pass
        class Square:
            pass
        Shape.register(Square)
        class Rows(list):
            pass
        rows = []
        other = Rows()
        text = "  Total: 42  "
        for i in range(5):
            label = "n" + str(i % 3)
            rows.append(label)
            rows.append(i * 2)
            other.append(label)
            clean = text.strip()
            same = clean.strip()
            bare = str(i * 7).strip()  # strip hands back its own self, held nowhere
            upper = clean.upper().endswith("42")
            parts = clean.split(":")
            number = int(parts[1]) + float("1.5") + bool(i)
            size = len(rows) + len(clean) + len(Named("abc"))
            kind = isinstance(i, int) and isinstance(Square(), Shape)
            if isinstance(label, (str, bytes, Shape)):  # its new tuple's clean-up: not quiet
                kind = not kind
            shown = str(Named("x" + label)) + repr(Named(label)) + repr(i)
            keyed = hash(Named(label)) == hash(label)
            code = ord(label[0]) + abs(-i)
            third = round(i / 3, 2)
            letter = chr(code % 26 + 65)
            same_id = id(rows) == id(rows) and callable(len)
            fmt = "{}-{}".format(label, i)
        try:
            int("x" + label)
        except ValueError:
            bad = label
        try:
            rows.append()
        except TypeError:
            missing = rows[-1]
        rows.append(Named(label))
        last = rows[-1]
        first = rows[0]
        """,
        frozenset(),
        (),
    )
)
QUICK_CASES.append(
    OpcodeCase(
        "quick_builds",
        """
        class Noisy:
            def __init__(self, v):
                self.v = v
            def __del__(self):
                gone.append(self.v)
        gone = []
        rows = []
        for i in range(4):
            name = "n" + str(i)
            pair = (name, i * 2)
            trio = [i, name, pair]
            row = {"id": i, "name": name, "pair": pair, "tags": [name, "x"]}
            twice = {"k": Noisy(i), "k": Noisy(i + 10)}
            mixed = {name: i, "fixed": pair}
            empty = ()
            nothing = []
            spread = [*trio, *pair]
            keyed = {1: name, 2: pair, "three": trio}
            rows.append((row, trio))
            seen = {}
            for ch in name:
                seen[ch] = i
            for part in pair:
                last = part
            for key in row.keys():
                seen[key] = row[key]
            for value in row.values():
                last = value
            for key, value in row.items():
                seen[key] = value
            for member in {name, "y"}:
                last = member
            for n in range(i):
                last = n
            items = iter(trio)
            for item in items:
                last = item
            for made in (t for t in trio):
                last = made
            for a in trio:
                for b in trio:
                    last = (a, b)
        got = rows[-1][0]["pair"][1] + rows[0][1][0]
        first = twice["k"].v
        del twice  # its __del__ now, not when a later run's collection finds this namespace
        """,
        frozenset(),
        (),
    )
)
ALL_CASES = [*CASES, *QUICK_CASES]
QUICK_IDS = {c.id for c in QUICK_CASES}


def _every_tag_at(case: OpcodeCase, counter: int, *, eval_loop: bool) -> tuple[list[Any], int]:
    """Every tag the frames hold at `counter`'s event (their locals, the stopped frame's value
    stack, the module's names), innermost frame first; and how many instructions the loop
    tagged itself. (A caller's value stack is not read: the loop keeps its stack pointer to
    itself while the frame calls.)"""
    code = case.compile()
    engine = Engine(_own(case), eval_loop=eval_loop)
    seen: list[Any] = []

    def at(frame: Any, _counter: int) -> None:
        f = frame
        while f is not None and f.f_code.co_filename == case.filename:
            seen.append(
                (
                    f.f_code.co_name,
                    [(name, tag) for name, _, tag in engine.frame_locals(f)],
                    [tag for _, tag in engine.frame_stack(f)] if f is frame else None,
                )
            )
            f = f.f_back
        names = frame.f_globals
        seen.append(sorted((k, engine.item_tag(names, k, v)) for k, v in names.items()))

    engine.stop_at_counter(counter, at)
    with _attached(engine):
        exec(code, _globals(case))  # noqa: S102 - the case's own program, compiled above
    assert seen, f"{case.id}: never reached counter {counter}"
    return seen, engine.stats()["loop_quick"]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_the_instructions_the_loop_tags_itself_leave_the_same_tags(case: OpcodeCase) -> None:
    # A stop at a counter watches that one instant: before and after it the loop tags moves,
    # constants and plain operators itself (step_quietly, step_computing), so what every frame
    # holds at the stop is what those instructions left there.
    total = run_case(case, eval_loop=False).counter
    quick = 0
    stops = 150 if case.id in QUICK_IDS else 12  # the quick programs: most of their instants
    for counter in sorted({1 + k * (total - 1) // (stops - 1) for k in range(stops)}):
        loop, ran = _every_tag_at(case, counter, eval_loop=True)
        reference, none = _every_tag_at(case, counter, eval_loop=False)
        assert loop == reference, counter
        assert none == 0
        quick = max(quick, ran)
    assert quick > 0 or case.id.startswith(_NOT_LOOPED)


def test_calls_of_python_functions_are_counted_by_the_loop_itself() -> None:
    # quick_calls' plain calls (recursion, methods, closures, nested) go by step_calling; those
    # with keywords, defaults, *args, a cell parameter or a generator go by the two halves.
    case = next(c for c in QUICK_CASES if c.id == "quick_calls")
    loop, reference = run_case(case), run_case(case, eval_loop=False)
    assert loop.counter == reference.counter
    assert reference.stats["loop_calls"] == 0
    # A function's first call goes by the two halves (the loop makes the callee's record
    # then): fib(7)'s 41 calls give 40, the program's other plain calls at least 8 more.
    assert loop.stats["loop_calls"] >= 40 + 8


def test_calls_of_classes_are_counted_by_the_loop_itself() -> None:
    # quick_classes' plain classes (a class statement's own, type as metaclass, object's
    # __new__, an __init__ taking its arguments by position) go by step_calling: Point, Held,
    # Child, Dying (after each class's first call, which makes its __init__'s record); Calls
    # with a default, Made, ByMeta, Abstract and Empty() by the two halves.
    case = next(c for c in QUICK_CASES if c.id == "quick_classes")
    loop, reference = run_case(case), run_case(case, eval_loop=False)
    assert loop.counter == reference.counter
    assert reference.stats["loop_calls"] == 0
    # Point's 1 + 4 moved + Child's 3 + Held's 1 + Dying's 2, their first calls aside.
    assert loop.stats["loop_calls"] >= 11


def test_calls_of_quiet_c_code_are_counted_by_the_loop_itself() -> None:
    # quick_c_calls' list.append, str methods, str/int/float/bool of a value and len,
    # isinstance and the like go by step_calling; a list subclass's append, a str method with
    # an argument that is not plain, and min/max-like builtins by the two halves. Those that
    # run Python code (str() of a Named, an ABC's isinstance) get the pending half then.
    case = next(c for c in QUICK_CASES if c.id == "quick_c_calls")
    loop, reference = run_case(case), run_case(case, eval_loop=False)
    assert loop.counter == reference.counter
    assert reference.stats["loop_calls"] == 0
    # A call whose clean-up gets the pending half after all ends the run of quick instructions:
    # the next one completes it first, at the depth the CALL left.
    assert loop.stats["depth_mismatches"] == reference.stats["depth_mismatches"] == 0
    # Each of the 5 rounds: at least 2 appends, 4 str methods, str, int, float, bool, 2 len.
    assert loop.stats["loop_calls"] >= 5 * 12
    # The list split made is a container the call made, as the two halves record it.
    made = []
    for eval_loop in (True, False):
        engine = Engine(_own(case), eval_loop=eval_loop)
        ns = _globals(case)
        with _attached(engine):
            exec(case.compile(), ns)  # noqa: S102 - the case's own program
        made.append(engine.object_counters(ns["parts"]))
    assert made[0] == made[1]
    assert made[0][0] > 0


@pytest.mark.parametrize("eval_loop", [True, False], ids=["loop", "two halves"])
def test_a_class_call_binds_each_argument_at_its_own_position(eval_loop: bool) -> None:
    # __init__ is handed the new instance first: its parameter k is the call's argument k - 1,
    # even where argument k is the same object (`Point(a, b)` with a and b both the int 0:
    # x is a's 0, y is b's; the two halves used to give x b's tag).
    source = textwrap.dedent(
        """
        class Point:
            def __init__(self, x, y):
                self.x = x
                self.y = y
        a = 0
        b = 0
        for i in range(3):
            p = Point(a, b)
        """
    )
    ns: dict[str, Any] = {"__name__": "__main__"}
    engine = Engine(lambda filename: False, eval_loop=eval_loop)
    with _attached(engine):
        exec(compile(source, "/classes/app.py", "exec"), ns)  # noqa: S102 - the test's program
    a_tag, b_tag = engine.item_tag(ns, "a", 0), engine.item_tag(ns, "b", 0)
    assert 0 < a_tag < b_tag
    assert engine.attr_tag(ns["p"], "x", 0) == a_tag
    assert engine.attr_tag(ns["p"], "y", 0) == b_tag
    assert engine.stats()["loop_calls"] == (2 if eval_loop else 0)


def _watched(case: OpcodeCase, eval_loop: bool, arm: Callable[[Any, list[Any]], None]) -> list[Any]:
    """The case run under an engine `arm` set watching, and what its callbacks noted."""
    code = case.compile()
    engine = Engine(_own(case), eval_loop=eval_loop)
    seen: list[Any] = []
    arm(engine, seen)
    with _attached(engine):
        exec(code, _globals(case))  # noqa: S102 - the case's own program, compiled above
    return seen


def _every(case: OpcodeCase, interval: int, *, eval_loop: bool) -> list[Any]:
    """At every `interval`-th instruction: its counter and the stopped frame's tags."""

    def arm(engine: Any, seen: list[Any]) -> None:
        def at(frame: Any, counter: int) -> None:
            locals_ = [(n, t) for n, _, t in engine.frame_locals(frame)]
            seen.append((counter, locals_, [t for _, t in engine.frame_stack(frame)]))

        engine.every(interval, at)

    return _watched(case, eval_loop, arm)


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
def test_captures_and_checkpoints_between_quick_instructions_come_at_the_same_instants(
    case: OpcodeCase,
) -> None:
    # A capture of some instructions and a callback every few (a session's checkpoints) are
    # instants the loop leaves to the two halves; between them it tags instructions itself.
    total = run_case(case, eval_loop=False).counter
    sparse = list(range(3, total + 1, 7))
    a, b = capture_case(case, sparse), capture_case(case, sparse, eval_loop=False)
    assert sorted(a.opname) == sorted(b.opname) == sparse
    assert (a.opname, a.inputs, a.callbacks) == (b.opname, b.inputs, b.callbacks)
    loop = _every(case, 5, eval_loop=True)
    assert [c for c, *_ in loop] == list(range(5, total + 1, 5))
    assert loop == _every(case, 5, eval_loop=False)


def _rearmed(case: OpcodeCase, step: int, *, eval_loop: bool) -> list[Any]:
    """Stops that each set the next one `step` instructions on, from inside the callback:
    where each came and what the stopped frame held."""

    def arm(engine: Any, seen: list[Any]) -> None:
        def at(frame: Any, counter: int) -> None:
            seen.append((counter, [t for _, _, t in engine.frame_locals(frame)]))
            engine.stop_at_counter(counter + step, at)

        engine.stop_at_counter(step, at)

    return _watched(case, eval_loop, arm)


@pytest.mark.parametrize("case", QUICK_CASES, ids=[c.id for c in QUICK_CASES])
def test_a_stop_set_by_a_callback_inside_a_run_of_quick_instructions_comes(
    case: OpcodeCase,
) -> None:
    # Between two quick instructions the loop checks only the counter against the next watched
    # instant it worked out (Tracer::QuickRun); a stop set by Python code run since (here a
    # stop's own callback) must end that reckoning, not be skipped.
    total = run_case(case, eval_loop=False).counter
    loop = _rearmed(case, 3, eval_loop=True)
    assert [c for c, _ in loop] == list(range(3, total + 1, 3))
    assert loop == _rearmed(case, 3, eval_loop=False)


FREES = """\
class Noisy:
    def __init__(self, v):
        self.v = v
    def __del__(self):
        seen = self.v
def f():
    x = Noisy(1)
    x = Noisy(2)
    Noisy(3)
    if Noisy(6) is not None:
        pass
f()
g = Noisy(4)
g = Noisy(5)
pick = {"k": 1, "n": Noisy(7)}["k"]
got = Noisy(8).v
g.w = Noisy(9)
g.w = 0
Noisy(10).v = 2
g = None
for item in [Noisy(11), 0]:
    pass
for key, val in {"n": Noisy(12)}.items():
    pass
held = {"m": Noisy(13), "n": Noisy(14)}
for key, val in held.items():
    held[key] = 0
    del val
del key
box = {"k": Noisy(15)}
box["k"] = 1
once = {k: Noisy(16) if n == 0 else n for n, k in enumerate("aa")}
cells = [Noisy(17), 0]
cells[-2] = 2
class Plain:
    pass
wrap = Plain()
wrap.inner = Noisy(18)
wrap = None
def ignore(v):
    return 0
def drop_after_call():
    ignore(0)
    ignore(Noisy(19))
drop_after_call()
"""


def _in_del(hit: int, *, eval_loop: bool) -> list[tuple[str, int]]:
    """The tags of __del__'s locals at its `hit`-th run (FREES)."""
    code = compile(FREES, "<frees>", "exec")
    engine = Engine(lambda filename: filename != "<frees>", eval_loop=eval_loop)
    seen: list[tuple[str, int]] = []

    def at(frame: Any, _counter: int) -> None:
        seen.extend((name, tag) for name, _, tag in engine.frame_locals(frame))

    engine.stop_at_line("<frees>", FREES.splitlines().index("        seen = self.v") + 1, hit, at)
    engine.attach()
    try:
        exec(code, {"__name__": "frees"})  # noqa: S102 - the program above
    finally:
        engine.detach()
    return seen


@pytest.mark.parametrize("hit", range(1, 20))
def test_a_pop_or_store_that_runs_del_is_left_to_the_two_halves(hit: int) -> None:
    # STORE_FAST, POP_TOP, a jump's pop, STORE_NAME, a subscript of a dict nothing else holds,
    # an attribute of an instance nothing else holds, an attribute's old value replaced, the end
    # of a loop over a list or a dict nothing else holds, a dict's items() reusing its tuple, a
    # dict's value or a list's item replaced by a store or a comprehension, an instance of a
    # class with no __del__ freed with the one it holds, an argument a call drops after its
    # Python callee returned: each frees an object whose __del__ runs
    # Python code while they run (the loop leaves such an instance to the two halves): self
    # has the same tag either way.
    loop = _in_del(hit, eval_loop=True)
    assert loop == _in_del(hit, eval_loop=False)
    assert dict(loop)["self"] != 0


def recorded_slices(
    case: OpcodeCase, *, eval_loop: bool, batch: int, depth: int = 64, bound: int = 0
) -> tuple[dict[int, Any], int]:
    """The backward slice (at `depth`) of every value the module holds at the end, with the
    edges recorded over the whole run, packed every `batch` edges and kept within `bound`
    levels of a live value (0: no bound); and how many input tags were kept."""
    code = case.compile()
    engine = Engine(_own(case), eval_loop=eval_loop)
    engine.record_edges(1 << 60, 1 << 24, None, batch=batch, depth=bound)
    names = _globals(case)
    with _attached(engine):
        exec(code, names)  # noqa: S102 - the case's own program, compiled above
    roots = sorted({engine.item_tag(names, k, v) for k, v in names.items()} - {0})
    assert roots, case.id
    slices = {root: engine.backward_slice(root, depth, 100_000) for root in roots}
    return slices, engine.edge_tags


def _slices_at_end(case: OpcodeCase, *, eval_loop: bool, batch: int) -> dict[int, Any]:
    return recorded_slices(case, eval_loop=eval_loop, batch=batch)[0]


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.id for c in ALL_CASES])
@pytest.mark.parametrize("batch", [0, 8])
def test_the_instructions_the_loop_tags_itself_record_the_same_edges(
    case: OpcodeCase, batch: int
) -> None:
    # While a slice is recorded the loop still tags moves and plain operators itself, and
    # records a plain operator's edge itself: every slice is the same node for node, packed
    # in the default batches or after every 8 edges (what a compaction keeps is what is live).
    loop = _slices_at_end(case, eval_loop=True, batch=batch)
    assert loop == _slices_at_end(case, eval_loop=False, batch=batch)


def test_the_loop_runs_the_frames_it_can_and_leaves_the_rest_to_cpython() -> None:
    ran = {c.id: run_case(c).stats for c in CASES}
    assert sum(s["loop_frames"] for s in ran.values()) > len(CASES)
    # A frame reaching an opcode the loop does not implement goes on in CPython's loop
    # (`match` has MATCH_*; the cases above give the same answers through the hand-off).
    assert ran["match"]["loop_handoffs"] > 0
    assert sum(s["loop_handoffs"] for s in ran.values()) < sum(
        s["loop_frames"] for s in ran.values()
    )
    # A generator's frame is CPython's under the trace callback: traced, not looped.
    generators = [i for i in ran if any(word in i for word in _NOT_LOOPED)]
    assert generators
    assert all(ran[i]["frames"] > ran[i]["loop_frames"] for i in generators)


# -- what the program does: the same as plain CPython ---------------------------------------

PROGRAMS = {
    "arithmetic": """
        def f(n):
            return [i * 3 % 7 - i // 2**2 + (i << 1 >> 1 ^ 3 | 4 & 5) - +i for i in range(n)]
        r = f(50)
        r.append(-r[3] / 2 if r else ~5)
    """,
    "names": """
        def f():
            return undefined_name
        r = f()
    """,
    "unbound local": """
        def f(flag):
            if flag:
                x = 1
            return x
        r = f(False)
    """,
    "unbound free": """
        def outer():
            def inner():
                return v
            r = inner()
            v = 1
            return r
        r = outer()
    """,
    "deleted local": """
        def f():
            x = 1
            del x
            return x
        r = f()
    """,
    "unpacking": """
        def f(seq):
            a, b = seq
            return a + b
        r = [f((1, 2)), f([3, 4])]
        try:
            f([1, 2, 3])
        except ValueError as e:
            r.append(str(e))
        try:
            f([1])
        except ValueError as e:
            r.append(str(e))
        f(5)
    """,
    "raise from": """
        def f(n):
            try:
                return 10 // n
            except ZeroDivisionError as e:
                raise ValueError("no zero") from e
        r = f(2)
        f(0)
    """,
    "bare raise and finally": """
        log = []
        def f(n):
            try:
                try:
                    if n:
                        raise KeyError(n)
                finally:
                    log.append("finally")
            except KeyError:
                log.append("caught")
                raise
        f(0)
        f(1)
    """,
    "no active exception": """
        def f():
            raise
        f()
    """,
    "not an exception": """
        def f():
            raise 5
        f()
    """,
    "with statements": """
        class Quiet:
            def __init__(self, log):
                self.log = log
            def __enter__(self):
                self.log.append("enter")
                return self
            def __exit__(self, kind, value, tb):
                self.log.append(kind.__name__ if kind else None)
                return kind is ZeroDivisionError
        log = []
        def f(n):
            with Quiet(log) as q:
                x = 1 / n
            return q is not None, log
        r = f(1), f(0)
        def g():
            with 5:
                pass
        g()
    """,
    "calls": """
        class A:
            def __init__(self, v):
                self.v = v
            def m(self, a, b=2, *, c=3):
                return self.v + a + b + c
        def f(x, y=1):
            return x - y
        a = A(10)
        bound = a.m
        r = [f(5), f(5, y=3), f(y=2, x=9), a.m(1), a.m(1, c=5), bound(2, 3), A.m(a, 0),
             sorted([3, 1, 2], key=lambda v: -v), list(map(f, [1, 2]))]
    """,
    "containers and formats": """
        def f(n):
            t = (n, n + 1)
            s = {n, n, 2}
            d = {"a": n, "b": t}
            d2 = {n: n * 2 for n in range(3)}
            lst = [*t, *s]
            dd = {**d, "c": 1}
            s2 = {*lst}
            text = f"{n!r:>5}|{n!s}|{n!a}|{n:03d}|{'x'}"
            sl = lst[1:3], lst[::2]
            lst[0] = 9
            del lst[1]
            return t, sorted(s), d, d2, lst, dd, sorted(s2), text, sl, n in s, n not in t
        r = f(4)
        try:
            [*5]
        except TypeError as e:
            r = r + (str(e),)
        def g():
            d = {}
            d.update(**{"a": 1})
            return {**5}
        g()
    """,
    "closures and classes": """
        def counter():
            n = 0
            def inc(by=1):
                nonlocal n
                n += by
                return n
            return inc
        c = counter()
        class K:
            base = 3
            def total(self, v):
                return self.base + v
        r = [c(), c(5), K().total(4), K.base]
    """,
    "comparisons and jumps": """
        def f(v):
            out = []
            for x in v:
                if x is None:
                    out.append("none")
                elif x and x > 2 or x == -1:
                    out.append(x)
                while x > 5:
                    x -= 2
                out.append(not x)
            return out
        r = f([None, 0, 3, -1, 8, 1])
        f([1, "a"])
    """,
    "imports": """
        def f():
            import json
            import os.path
            return json.dumps({"a": 1}), os.path.join("a", "b")
        r = f()
    """,
    "assert": """
        def f(n):
            assert n > 0, "positive"
            return n
        r = f(1)
        f(0)
    """,
    "hand-off partway through a frame": """
        def collect(*a, **k):
            return a, k
        def f(args, kw):
            x = len(args)
            got = collect(*args, **kw)
            match got:
                case ((first, *rest), {"d": d}):
                    pass
            try:
                return got, first, rest, x / d
            except ZeroDivisionError:
                raise ValueError("zero") from None
        r = f((1, 2), {"d": 2})
        f((1,), {"d": 0})
    """,
    "exit": """
        import sys
        def f(code):
            sys.exit(code)
        f(3)
    """,
    "exit with success": """
        import sys
        def f():
            raise SystemExit
        f()
    """,
    "star calls": """
        def add(a, b=0, *rest, c=1, **kw):
            return (a, b, rest, c, sorted(kw.items()))
        def wrap(*args, **kwargs):
            return add(*args, **kwargs)
        class Mapping(dict):
            pass
        def calls():
            return [wrap(1, 2, 3, c=4, d=5), add(*[1, 2]), add(*(i for i in (7, 8))),
                    add(**Mapping(a=1)), add(1, **{"c": 2}), wrap(*"xy")]
        def duplicated():
            return add(1, c=1, **{"c": 2})
        def not_iterable():
            return add(*5)
        def not_strings():
            return add(**{1: 2})
        r = calls()
        for bad in (duplicated, not_iterable):
            try:
                bad()
            except TypeError as e:
                r.append(str(e))
        not_strings()
    """,
    "star unpacking": """
        def f(seq):
            a, *b, c = seq
            return a, b, c
        def g(seq):
            *a, b = seq
            return a, b
        r = [f([1, 2, 3, 4]), f("xyz"), f(range(2)), g((1,)), f(iter([5, 6, 7]))]
        for bad in ([1], 5, ()):
            try:
                f(bad)
            except (ValueError, TypeError) as e:
                r.append(str(e))
        g([])
    """,
    "deletes and annotations": """
        x: int = 1
        counter = 0
        class Box:
            size: int = 3
            label = "b"
            def drop(self):
                del self.label
        box = Box()
        box.label = "mine"
        box.drop()
        def outer():
            v = 1
            class Inner:
                w = v + 1
            def clear():
                nonlocal v
                del v
            clear()
            try:
                return v
            except NameError as e:
                return Inner.w, type(e).__name__, str(e)
        def drop_global():
            global counter
            del counter
        r = [Box.__annotations__, __annotations__, box.label, outer()]
        drop_global()
        try:
            drop_global()
        except NameError as e:
            r.append(str(e))
        del x
        try:
            del x
        except NameError as e:
            r.append(str(e))
        box.drop()
    """,
    "imports from": """
        import sys
        import types
        made = types.ModuleType("made")
        made.value = 41
        made.__getattr__ = lambda name: f"lazy {name}"
        class Special(types.ModuleType):
            pass
        special = Special("special")
        special.x = 3
        sys.modules["made"], sys.modules["special"] = made, special
        def f():
            from os import sep
            from os.path import join
            from made import value, other
            from special import x
            return sep, join("a", "b"), value, other, x
        try:
            r = [f()]
            try:
                from os import not_there
            except ImportError as e:
                r.append((str(e), e.name))
        finally:
            del sys.modules["made"], sys.modules["special"]
        from math import nope
    """,
    # LOAD_GLOBAL remembers what it found while neither namespace changes: each change
    # below (a global rebound, shadowing a builtin and no longer, a builtin rebound or gone,
    # another module's globals for the same code) is seen at the next load.
    "global lookups": """
        import builtins, types
        def f():
            return value, len, probe
        log = []
        value = 1
        builtins.probe = "b1"
        try:
            log.append(f())
            value = 2
            log.append(f())
            len = "shadow"
            log.append(f())
            del len
            log.append(f())
            builtins.probe = "b2"
            log.append(f())
            probe = "g"
            log.append(f())
            del probe
            log.append(f())
            other = types.FunctionType(f.__code__, {"value": 3, "len": 9, "__builtins__": builtins})
            log += [other(), f(), other()]
            del builtins.probe
            log.append(f())
        finally:
            builtins.__dict__.pop("probe", None)
    """,
    # LOAD_ATTR and LOAD_METHOD the loop counts itself push what its check found: the
    # instance's own attribute (in its inline values or in a __dict__ made for it), one that
    # shadows a method, the type's method, and none (deleted: AttributeError).
    "attribute lookups": """
        class Box:
            def __init__(self, v):
                self.v = v
            def get(self):
                return ("method", self.v)
        def read(b):
            return b.v, b.get()
        log = []
        a, b = Box(1), Box(2)
        b.get = lambda: ("own", 0)
        log += [read(a), read(b)]
        vars(a)["v"] = 3
        a.w = 4
        log += [read(a), a.w]
        del b.get
        log.append(read(b))
        del a.v
        r = read(a)
    """,
    "exception matching": """
        def f():
            try:
                {}["k"]
            except (TypeError, KeyError) as e:
                return repr(e)
        def g():
            try:
                1 / 0
            except 5:
                pass
        r = f()
        g()
    """,
}


def _outcome(source: str, eval_loop: bool | None) -> tuple[Any, ...]:
    """What the program did: its globals' r, or its exception and traceback's lines."""
    code = compile(textwrap.dedent(source), "<program>", "exec")
    namespace: dict[str, Any] = {"__name__": "__program__"}
    engine = None
    if eval_loop is not None:
        engine = Engine(lambda filename: filename != "<program>", eval_loop=eval_loop)
        engine.attach()
    try:
        exec(code, namespace)  # noqa: S102 - the test's own programs
        raised: tuple[Any, ...] = ()
    except BaseException as exc:  # compared below, whatever it is
        frames = [(f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)][1:]
        chain = [type(exc).__name__, str(exc), getattr(exc, "name", None), frames]
        if exc.__cause__ is not None:
            chain += [type(exc.__cause__).__name__, str(exc.__cause__)]
        raised = tuple(chain)
    finally:
        if engine is not None:
            engine.detach()
    if engine is not None:
        stats = engine.stats()
        assert stats["depth_mismatches"] == 0, stats
        assert (stats["loop_frames"] > 0) == bool(eval_loop), stats
    return repr(namespace.get("r")), repr(namespace.get("log")), raised


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_does_under_the_loop_what_it_does_in_cpython(name: str) -> None:
    plain = _outcome(PROGRAMS[name], None)
    assert _outcome(PROGRAMS[name], True) == plain
    assert _outcome(PROGRAMS[name], False) == plain


def _loop_stats(source: str) -> dict[str, Any]:
    code = compile(textwrap.dedent(source), "<program>", "exec")
    engine = Engine(lambda filename: filename != "<program>", eval_loop=True)
    engine.attach()
    try:
        exec(code, {"__name__": "__program__"})  # noqa: S102 - the test's own programs
    finally:
        engine.detach()
    stats: dict[str, Any] = engine.stats()
    return stats


_GUARDED = """
import sys, types
made = types.ModuleType("made")
made.__getattr__ = lambda name: name
sys.modules["made"] = made
class Mapping:
    def keys(self):
        return ["z"]
    def __getitem__(self, key):
        return 1
def add(a, b=0, **kw):
    return a + b + len(kw)
def call():
    {call}
call()
"""


@pytest.mark.parametrize(
    "call",
    [
        "from os import sep",
        "return add(*[1, 2]) + add(*(1, 2))",
        "return add(1, b=2, **{'z': 1})",
        "args, kwargs = (1,), {'b': 2}; return add(*args, **kwargs)",
    ],
)
def test_a_guarded_instruction_in_its_common_case_runs_in_the_loop(call: str) -> None:
    assert _loop_stats(_GUARDED.replace("{call}", call))["loop_handoffs"] == 0


@pytest.mark.parametrize(
    "call",
    [
        "from made import lazy",  # a module's __getattr__
        "try:\n        from os import not_there\n    except ImportError:\n        pass",
        "return add(*(i for i in (1, 2)))",  # an iterable that is not a tuple or a list
        "return add(1, **Mapping())",  # a mapping that is not a dict
        "try:\n        add(1, z=1, **{'z': 2})\n    except TypeError:\n        pass",
    ],
)
def test_a_guarded_instruction_in_a_rarer_case_hands_the_frame_to_cpython(call: str) -> None:
    # What the program then does is CPython's (the programs above, "star calls" and
    # "imports from", hold the loop's frames to it).
    assert _loop_stats(_GUARDED.replace("{call}", call))["loop_handoffs"] > 0


_FRAMES = """
import sys
seen = []
def f():
    x = 1
    seen.append(id(sys._getframe()))
    seen.append(id(sys._getframe().f_back))
f()
"""


def _frame_objects(ask: Callable[[Engine, list[int]], None]) -> tuple[list[int], list[int]]:
    """The ids of f's frame object and its caller's as a question's callback saw them (the
    first two it saw), and as f itself later sees them."""
    code = compile(_FRAMES, "<frames>", "exec")
    namespace: dict[str, Any] = {"__name__": "frames"}
    engine = Engine(lambda filename: filename != "<frames>", eval_loop=True)
    asked: list[int] = []
    ask(engine, asked)
    with _attached(engine):
        exec(code, namespace)  # noqa: S102 - the program above
    assert engine.stats()["loop_frames"] > 0
    return asked[:2], list(namespace["seen"])


def test_a_question_s_callback_leaves_no_frame_object_the_program_did_not_make() -> None:
    """The loop makes no frame objects; a stop's or a capture's callback is handed one (and
    may walk f_back). Made from the program's heap and kept, each would move the address of
    what the program allocates next, in that pass only: a set of objects iterates in the
    order of their ids, and uvicorn's replay took another branch (anyio chose another root
    task), so the passes of one question counted different instructions. They are made
    quietly and dropped after the callback: what the program later asks for is its own."""
    line = _FRAMES.splitlines().index("    x = 1") + 1
    counters: list[int] = []

    def stop(engine: Engine, asked: list[int]) -> None:
        def at(frame: Any, counter: int) -> None:
            counters.append(counter)
            asked.extend((id(frame), id(frame.f_back)))

        engine.stop_at_line("<frames>", line, 1, at)

    def capture(engine: Engine, asked: list[int]) -> None:
        def pre(frame: Any, *_: Any) -> None:
            asked.extend((id(frame), id(frame.f_back)))

        engine.capture(counters, pre, lambda *_: None)

    for ask in (stop, capture):
        callback_saw, program_saw = _frame_objects(ask)
        assert len(callback_saw) == 2 and len(program_saw) == 2
        assert not set(callback_saw) & set(program_saw), ask.__name__


_COUNTED = """
import gc
gc.disable()
before = gc.get_count()[0]
x = [1]
y = [2]
counted = gc.get_count()[0] - before
gc.enable()
"""


def _counted(stop: bool, eval_loop: bool) -> int:
    """What the program's young generation counted across two lines, with a stop's callback
    between them that only the engine holds (as a question's is: the engine lets it go once
    it has been called)."""
    code = compile(_COUNTED, "<counted>", "exec")
    namespace: dict[str, Any] = {"__name__": "counted"}
    engine = Engine(lambda filename: filename != "<counted>", eval_loop=eval_loop)
    if stop:
        line = _COUNTED.splitlines().index("y = [2]") + 1
        engine.stop_at_line("<counted>", line, 1, lambda frame, counter: None)
    with _attached(engine):
        exec(code, namespace)  # noqa: S102 - the program above
    return int(namespace["counted"])


@pytest.mark.parametrize("eval_loop", [True, False])
def test_a_stop_s_callback_is_let_go_where_the_program_cannot_count_it(eval_loop: bool) -> None:
    """A callback freed under the program counts a deallocation against its young
    generation, and the program's next collection comes an allocation later than in a pass
    that asked nothing: a finalizer runs at another instant and the passes of one question
    count different instructions. The engine lets it go inside the quiet scope."""
    assert _counted(True, eval_loop) == _counted(False, eval_loop)


_RECURSION = """
import sys
from tests.native.test_eval_loop import _outcome
lines = ["depth = 0", "def down():", "    global depth", "    depth += 1", "    down()",
         "try:", "    down()", "except RecursionError:", "    r = depth"]
sys.setrecursionlimit(300)
modes = {"None": None, "True": True, "False": False}
print(_outcome(chr(10).join(lines), modes[sys.argv[1]])[0])
"""


def test_recursion_runs_out_at_the_same_depth() -> None:
    # Each in a fresh process: what a process did before moves the depth left by one.
    def depth(mode: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", _RECURSION, mode],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    plain = depth("None")
    assert int(plain.strip("'")) > 200
    assert depth("True") == plain
    assert depth("False") == plain


_DEEP = """
import os, sys, threading
from sealtrace._engine import Engine
sys.setrecursionlimit(1_000_000)
threading.stack_size(1 << 20)
def run():
    engine = Engine(lambda filename: False, eval_loop=True)
    engine.attach()
    def down(n):
        return down(n + 1)
    try:
        down(0)
    except RecursionError as exc:
        os.write(1, str(exc).encode())
    finally:
        engine.detach()
thread = threading.Thread(target=run)
thread.start()
thread.join()
"""


def test_a_recursion_past_the_c_stack_is_a_recursion_error_not_a_crash() -> None:
    # With the recursion limit far up, a thread's 1 MiB stack runs out long before it: the
    # loop raises RecursionError where it would crash (it did, at about 2,500 levels).
    out = subprocess.run(
        [sys.executable, "-c", _DEEP], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "the C stack is nearly used up" in out.stdout


def test_a_different_outcome_is_told_apart() -> None:
    # The comparison's negative control: a program that raises on another line, or with
    # another message, is not the same outcome.
    base = _outcome(PROGRAMS["unbound local"], None)
    moved = _outcome("\n" + textwrap.dedent(PROGRAMS["unbound local"]), True)
    assert moved != base
    renamed = _outcome(PROGRAMS["unbound local"].replace("return x", "return (x)"), True)
    assert renamed == _outcome(PROGRAMS["unbound local"].replace("return x", "return (x)"), None)
    other = _outcome(PROGRAMS["names"], True)
    assert other != base
