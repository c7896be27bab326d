"""The opcode coverage table: small programs, the opcodes each exercises, and what the
provenance engine must say about a value in each.

Every opcode CPython 3.11 can execute (`dis.opmap` minus CACHE) is claimed by at least one
case; `tests/native/test_opcodes.py` runs every case under a fresh engine and
`native/opcode_coverage.py` turns this table into docs/opcodes.md. A case's source is
dedented and compiled as the file `/opcases/<id>.py`; a line that ends in `# @X` is the stop
line `X`: the run stops before that line first executes (or before its `hit`-th execution)
and reads the tags of the expectation's expressions there.

This module is data: it must never import the engine, so the generator can read it anywhere.
"""

from __future__ import annotations

import dis
import re
import textwrap
from dataclasses import dataclass, field
from types import CodeType

ALL_OPCODES = frozenset(dis.opmap) - {"CACHE"}

# These run before a frame's first traced instruction (RESUME only raises the call event that
# binds arguments), so no opcode event shows them: their cases prove their effect instead.
NOT_TRACED = frozenset({"RESUME", "MAKE_CELL", "COPY_FREE_VARS", "RETURN_GENERATOR"})

_MARKER = re.compile(r"#\s*@(\w+)\s*$")


@dataclass(frozen=True)
class Expect:
    """A provenance claim about the value of `expr` at stop line `at`.

    `expr` is a name (local, cell, class-body or global), `name.attr` or `name[key]`; the
    other expressions are read at the same stop.
    """

    at: str
    expr: str
    # The opname of the instruction whose counter is the value's tag (the producer).
    producer: str | None = None
    # Expressions whose tags are among the producer's stack inputs.
    inputs: tuple[str, ...] = ()
    # Expressions whose tags the producer received as return values of Python code that
    # C code called while the producer ran (sorted's key, map's function, sum's generator).
    callbacks: tuple[str, ...] = ()
    # An expression that must carry the very same tag (a move kept it).
    same_as: str | None = None
    # Expressions whose tags must differ from this one's.
    differs: tuple[str, ...] = ()
    hit: int = 1


@dataclass(frozen=True)
class OpcodeCase:
    id: str
    source: str
    opcodes: frozenset[str]
    expects: tuple[Expect, ...]
    mode: str = "exec"
    filename: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "source", textwrap.dedent(self.source).lstrip("\n"))
        object.__setattr__(self, "filename", f"/opcases/{self.id}.py")

    def compile(self) -> CodeType:
        return compile(self.source, self.filename, self.mode, dont_inherit=True)

    def line(self, marker: str) -> int:
        for number, text in enumerate(self.source.splitlines(), start=1):
            m = _MARKER.search(text)
            if m and m.group(1) == marker:
                return number
        raise LookupError(f"{self.id}: no line marked @{marker}")


def case(
    id: str, opcodes: str, source: str, *expects: Expect, seed: bool = False, mode: str = "exec"
) -> OpcodeCase:
    """A case; `seed` puts `n`, `x` and `y` (computed, unshared ints) first in its module."""
    body = textwrap.dedent(source).lstrip("\n")
    return OpcodeCase(id, (SEED if seed else "") + body, frozenset(opcodes.split()), expects, mode)


def code_opcodes(code: CodeType) -> set[str]:
    """The de-specialised opnames in `code` and every code object nested in its constants."""
    names = {ins.opname for ins in dis.get_instructions(code)}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= code_opcodes(const)
    return names


# Values above 256 are not shared by the interpreter, so identity says which one a slot holds.
SEED = """\
n = len("abcdef")
x = n * 1000
y = n * 2000
"""

CASES: tuple[OpcodeCase, ...] = (
    case(
        "move_local",
        "RESUME LOAD_FAST STORE_FAST LOAD_CONST BINARY_OP RETURN_VALUE PUSH_NULL LOAD_NAME "
        "PRECALL CALL STORE_NAME MAKE_FUNCTION",
        """
        def f(a, k):
            c = a * k
            b = c
            return b  # @A
        r = f(6, 7)
        """,
        Expect("A", "b", producer="BINARY_OP", inputs=("a", "k"), same_as="c"),
        # RESUME raises the call event that binds arguments: `a` keeps the caller's tag.
        Expect("A", "a", producer="LOAD_CONST"),
    ),
    case(
        "unary",
        "UNARY_POSITIVE UNARY_NEGATIVE UNARY_NOT UNARY_INVERT",
        """
        def f(a):
            p = +a
            m = -a
            t = not a
            i = ~a
            return p  # @A
        f(x)
        """,
        Expect("A", "p", producer="UNARY_POSITIVE", inputs=("a",)),
        Expect("A", "m", producer="UNARY_NEGATIVE", inputs=("a",)),
        Expect("A", "t", producer="UNARY_NOT", inputs=("a",)),
        Expect("A", "i", producer="UNARY_INVERT", inputs=("a",)),
        seed=True,
    ),
    case(
        "globals",
        "LOAD_GLOBAL STORE_GLOBAL DELETE_GLOBAL POP_TOP",
        """
        def put(v):
            global g
            g = v * 2
        def take():
            global g
            h = g
            del g
            return h  # @A
        put(x)
        r = take()
        """,
        Expect("A", "h", producer="BINARY_OP", inputs=("x",)),
        seed=True,
    ),
    case(
        "module_names",
        "LOAD_NAME STORE_NAME DELETE_NAME",
        """
        z = x
        del x
        w = z
        done = 1  # @A
        """,
        Expect("A", "w", producer="BINARY_OP", inputs=("n",), same_as="z"),
        seed=True,
    ),
    case(
        "attributes",
        "LOAD_BUILD_CLASS LOAD_ATTR STORE_ATTR DELETE_ATTR LOAD_METHOD",
        """
        class Box:
            pass
        def f(v):
            b = Box()
            b.x = v * 2
            b.tmp = v
            del b.tmp
            got = b.x
            bits = b.x.bit_length()
            return got  # @A
        f(x)
        """,
        Expect("A", "got", producer="BINARY_OP", inputs=("v",), same_as="b.x"),
        Expect("A", "bits", producer="CALL", inputs=("got",)),
        Expect("A", "b", producer="CALL", inputs=("Box",)),
        seed=True,
    ),
    case(
        "subscripts",
        "BINARY_SUBSCR STORE_SUBSCR DELETE_SUBSCR BUILD_SLICE BUILD_MAP BUILD_LIST",
        """
        def f(v):
            d = {}
            d["k"] = v * 2
            d["tmp"] = v
            del d["tmp"]
            got = d["k"]
            items = [got, v]
            part = items[0:1]
            return got  # @A
        f(x)
        """,
        Expect("A", "got", producer="BINARY_OP", same_as='d["k"]'),
        Expect("A", "items[1]", same_as="v"),
        Expect("A", "part", producer="BINARY_SUBSCR", inputs=("items",)),
        seed=True,
    ),
    case(
        "tuples",
        "BUILD_TUPLE UNPACK_SEQUENCE SWAP COPY JUMP_IF_FALSE_OR_POP",
        """
        def f(a, b):
            p0 = a * 2
            q0 = b * 3
            t = (p0, q0)
            p, q = t
            ok = p0 < q0 < a
            return p  # @A
        f(x, y)
        """,
        # An unpacked variable keeps the tag of its own element, not the tuple's.
        Expect("A", "p", same_as="p0", differs=("t", "q0")),
        Expect("A", "q", same_as="q0"),
        Expect("A", "t", producer="BUILD_TUPLE", inputs=("p0", "q0")),
        # SWAP and COPY move q0 to the second comparison.
        Expect("A", "ok", producer="COMPARE_OP", inputs=("q0", "a")),
        seed=True,
    ),
    case(
        "unpack_star",
        "UNPACK_EX EXTENDED_ARG",
        """
        def f(a):
            t = [a * 2, a * 3, a * 4, a * 5]
            first, *mid, last = t
            return first  # @A
        f(x)
        """,
        Expect("A", "first", same_as="t[0]", differs=("t",)),
        Expect("A", "last", same_as="t[3]"),
        Expect("A", "mid[0]", same_as="t[1]"),
        Expect("A", "mid", producer="UNPACK_EX", inputs=("t",)),
        seed=True,
    ),
    case(
        "lists",
        "BUILD_LIST LIST_EXTEND LIST_APPEND LIST_TO_TUPLE GET_ITER FOR_ITER JUMP_BACKWARD",
        """
        def f(a, b):
            v0 = a * 2
            xs = [v0, b]
            ys = [*xs, b]
            tt = (*xs, b)
            comp = [v for v in xs]
            return v0  # @A
        f(x, y)
        """,
        Expect("A", "ys[0]", same_as="v0"),
        Expect("A", "ys[2]", same_as="b"),
        Expect("A", "tt[0]", same_as="v0"),
        Expect("A", "tt", producer="LIST_TO_TUPLE"),
        Expect("A", "comp[1]", same_as="b"),
        Expect("A", "comp", producer="BUILD_LIST"),
        seed=True,
    ),
    case(
        "sets",
        "BUILD_SET SET_UPDATE SET_ADD",
        """
        def f(a, b):
            v0 = a * 2
            s = {v0, b}
            s2 = {*s, b}
            s3 = {v for v in s}
            return s  # @A
        f(x, y)
        """,
        Expect("A", "s", producer="BUILD_SET", inputs=("v0", "b")),
        Expect("A", "s2", producer="BUILD_SET"),
        Expect("A", "s3", producer="BUILD_SET"),
        seed=True,
    ),
    case(
        "dicts",
        "BUILD_MAP BUILD_CONST_KEY_MAP DICT_UPDATE MAP_ADD BINARY_SUBSCR FOR_ITER MAKE_CELL "
        "LOAD_CLOSURE COPY_FREE_VARS LOAD_DEREF",
        """
        def f(a, b):
            v0 = a * 2
            one = {"a": v0}
            two = {"a": v0, "b": b}
            merged = {**two, "c": a}
            comp = {k: two[k] for k in two}
            return v0  # @A
        f(x, y)
        """,
        Expect("A", 'one["a"]', same_as="v0"),
        Expect("A", "one", producer="BUILD_MAP"),
        Expect("A", 'two["b"]', same_as="b"),
        Expect("A", "two", producer="BUILD_CONST_KEY_MAP"),
        Expect("A", 'merged["b"]', same_as="b"),
        Expect("A", 'merged["c"]', same_as="a"),
        Expect("A", 'comp["a"]', same_as="v0"),
        seed=True,
    ),
    case(
        "call_shapes",
        "KW_NAMES CALL_FUNCTION_EX DICT_MERGE BUILD_MAP BINARY_SUBSCR PRECALL CALL",
        """
        def g(a, b):
            return a  # @A
        def h(*args, **kwargs):
            first = args[0]
            named = kwargs["b"]
            return first  # @B
        g(b=y, a=x)
        t = (x, y)
        g(*t)
        m = {"a": x, "b": y}
        g(**m)
        h(x, b=y)
        h(*t, **m)
        """,
        Expect("A", "a", same_as="x"),
        Expect("A", "b", same_as="y"),
        Expect("A", "a", same_as="x", hit=2),
        Expect("A", "b", same_as="y", hit=2),
        Expect("A", "a", same_as="x", hit=3),
        Expect("A", "b", same_as="y", hit=3),
        Expect("B", "first", same_as="x"),
        Expect("B", "named", same_as="y"),
        Expect("B", "first", same_as="x", hit=2),
        Expect("B", "named", same_as="y", hit=2),
        seed=True,
    ),
    case(
        "closures",
        "MAKE_CELL LOAD_CLOSURE COPY_FREE_VARS LOAD_DEREF STORE_DEREF DELETE_DEREF",
        """
        def outer(a):
            c = a * 2
            def inner():
                got = a
                cc = c
                return got  # @A
            r = inner()
            del c
            return r
        outer(x)
        """,
        # MAKE_CELL: the argument's cell keeps the caller's tag; COPY_FREE_VARS: so does the
        # closure's view of it.
        Expect("A", "a", same_as="x"),
        Expect("A", "got", same_as="x"),
        Expect("A", "cc", producer="BINARY_OP", inputs=("a",)),
        seed=True,
    ),
    case(
        "class_body",
        "LOAD_CLASSDEREF SETUP_ANNOTATIONS",
        """
        def make(v):
            class K:
                attr = v
                ann: int = v
                same = attr  # @A
            return K
        K = make(x)
        """,
        Expect("A", "attr", same_as="x"),
        Expect("A", "ann", same_as="x"),
        Expect("A", '__annotations__["ann"]', producer="LOAD_NAME"),
        seed=True,
    ),
    case(
        "class_init",
        "LOAD_BUILD_CLASS MAKE_CELL LOAD_CLOSURE COPY_FREE_VARS STORE_ATTR LOAD_ATTR",
        """
        class Base:
            def __init__(self, v):
                self.v = v
        class Child(Base):
            def __init__(self, v):
                super().__init__(v * 2)
                self.w = self.v
        c = Child(x)
        done = 1  # @A
        """,
        Expect("A", "c.v", producer="BINARY_OP", inputs=("x",)),
        Expect("A", "c.w", same_as="c.v"),
        Expect("A", "Child", producer="CALL"),
        seed=True,
    ),
    case(
        "exceptions",
        "PUSH_EXC_INFO CHECK_EXC_MATCH POP_EXCEPT RAISE_VARARGS JUMP_FORWARD DELETE_FAST RERAISE",
        """
        def f(v):
            w = v * 2
            try:
                raise ValueError(w)
            except ValueError as e:
                got = e
            return got  # @A
        def g(v):
            try:
                try:
                    raise KeyError(v)
                finally:
                    v = v
            except KeyError as e:
                got = e
            return got  # @B
        f(x)
        g(x)
        """,
        Expect("A", "got", producer="CALL", inputs=("w",)),
        # RERAISE at the end of the finally block keeps the exception's tag.
        Expect("B", "got", producer="CALL", inputs=("v",)),
        seed=True,
    ),
    case(
        "unwinding",
        "RAISE_VARARGS RERAISE PUSH_EXC_INFO POP_EXCEPT BEFORE_WITH WITH_EXCEPT_START",
        """
        class Quiet:
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return False
        def inner(v):
            global made
            made = ValueError(v)
            raise made
        def middle(v):
            try:
                inner(v)
            except ValueError:
                try:
                    {}["missing"]
                except KeyError:
                    pass
                raise
        def outer(v):
            try:
                with Quiet():
                    middle(v)
            except ValueError as e:
                got = e
            return got  # @A
        outer(x)
        """,
        # Raised two frames down, re-raised bare after another exception was handled, unwound
        # through a with block that does not suppress it: the handler sees `inner`'s exception.
        Expect("A", "got", producer="CALL", inputs=("v",), same_as="made"),
        seed=True,
    ),
    case(
        "generator_throw",
        "YIELD_VALUE PUSH_EXC_INFO CHECK_EXC_MATCH RETURN_GENERATOR LOAD_METHOD",
        """
        def gen():
            try:
                yield 1
            except ValueError as e:
                got = e
                yield got  # @G
        def use(v):
            g = gen()
            next(g)
            err = ValueError(v)
            back = g.throw(err)
            return back  # @A
        use(x)
        """,
        Expect("A", "back", same_as="err", producer="CALL", inputs=("v",)),
        seed=True,
    ),
    case(
        "defaults",
        "MAKE_FUNCTION BUILD_TUPLE BUILD_CONST_KEY_MAP",
        """
        def make(v):
            def f(a, b=v * 2, *, c=v * 3):
                return a  # @A
            return f
        f = make(x)
        f(y)
        """,
        Expect("A", "b", producer="BINARY_OP", inputs=("x",)),
        Expect("A", "c", producer="BINARY_OP", inputs=("x",)),
        Expect("A", "a", same_as="y"),
        seed=True,
    ),
    case(
        "assert",
        "LOAD_ASSERTION_ERROR",
        """
        def f(v):
            try:
                assert v < 0
            except AssertionError as e:
                got = e
            return got  # @A
        f(x)
        """,
        Expect("A", "got", producer="LOAD_ASSERTION_ERROR"),
        seed=True,
    ),
    case(
        "except_star",
        "CHECK_EG_MATCH PREP_RERAISE_STAR",
        """
        def f(v):
            grp = ExceptionGroup("g", [ValueError(v)])
            try:
                raise grp
            except* ValueError as eg:
                got = eg
            return got  # @A
        f(x)
        """,
        Expect("A", "got", producer="CHECK_EG_MATCH", inputs=("grp",)),
        seed=True,
    ),
    case(
        "with",
        "BEFORE_WITH WITH_EXCEPT_START STORE_ATTR LOAD_ATTR RAISE_VARARGS",
        """
        class CM:
            def __enter__(self):
                return self.v
            def __exit__(self, typ, val, tb):
                seen = val
                return True  # @B
        def f(v):
            cm = CM()
            cm.v = v * 2
            with cm as got:
                raise ValueError(got)
            return got  # @A
        f(x)
        """,
        Expect("A", "got", producer="BINARY_OP", same_as="cm.v"),
        Expect("B", "seen", producer="CALL"),
        seed=True,
    ),
    case(
        "generators",
        "RETURN_GENERATOR YIELD_VALUE GET_YIELD_FROM_ITER SEND JUMP_BACKWARD_NO_INTERRUPT "
        "FOR_ITER GET_ITER",
        """
        def gen(a):
            yield a * 2  # @G
            return a * 3
        def deleg(a):
            r = yield from gen(a)
            yield r
        def use(a):
            out = []
            for v in deleg(a):
                out.append(v)
            return out  # @A
        use(x)
        """,
        # RETURN_GENERATOR: a generator's arguments are bound when it is created.
        Expect("G", "a", same_as="x"),
        Expect("A", "out[0]", producer="BINARY_OP", inputs=("x",)),
        # The value `yield from` returns is the inner generator's return value.
        Expect("A", "out[1]", producer="BINARY_OP", inputs=("x",), differs=("out[0]",)),
        seed=True,
    ),
    case(
        "coroutines",
        "GET_AWAITABLE SEND YIELD_VALUE RETURN_GENERATOR",
        """
        class Later:
            def __init__(self, v):
                self.v = v
            def __await__(self):
                yield
                return self.v
        async def inner(v):
            return await Later(v * 2)
        async def outer(v):
            got = await inner(v)
            return got  # @A
        def drive(c):
            try:
                while True:
                    c.send(None)
            except StopIteration as stop:
                return stop.value
        drive(outer(x))
        """,
        Expect("A", "got", producer="BINARY_OP", inputs=("v",)),
        seed=True,
    ),
    case(
        "async_iteration",
        "ASYNC_GEN_WRAP GET_AITER GET_ANEXT END_ASYNC_FOR BEFORE_ASYNC_WITH GET_AWAITABLE SEND "
        "YIELD_VALUE RETURN_GENERATOR",
        """
        async def agen(v):
            yield v * 2
        async def broken(v):
            yield v
            raise ValueError(v * 4)
        class ACM:
            async def __aenter__(self):
                return self.v
            async def __aexit__(self, *exc):
                return False
        async def main(v):
            got = []
            async for item in agen(v):
                got.append(item)
            cm = ACM()
            cm.v = v * 3
            async with cm as entered:
                pass
            try:
                async for item in broken(v):
                    pass
            except ValueError as e:
                failed = e
            return got  # @A
        def drive(c):
            try:
                while True:
                    c.send(None)
            except StopIteration as stop:
                return stop.value
        drive(main(x))
        """,
        Expect("A", "got[0]", producer="BINARY_OP", inputs=("v",)),
        Expect("A", "entered", same_as="cm.v"),
        # Re-raised by END_ASYNC_FOR: the exception keeps the tag it was made with.
        Expect("A", "failed", producer="CALL"),
        seed=True,
    ),
    case(
        "match",
        "MATCH_SEQUENCE MATCH_MAPPING MATCH_KEYS MATCH_CLASS GET_LEN COPY UNPACK_SEQUENCE",
        """
        class Point:
            __match_args__ = ("x",)
            def __init__(self, x, y):
                self.x = x
                self.y = y
        def f(subject):
            match subject:
                case [a, b]:
                    got = a
                case {"k": v}:
                    got = v
                case Point(px, y=py):
                    got = py
            return got  # @A
        f([x, y])
        f({"k": x})
        f(Point(y, x))
        """,
        Expect("A", "got", same_as="x"),
        Expect("A", "got", same_as="x", hit=2),
        Expect("A", "got", same_as="x", hit=3),
        Expect("A", "px", same_as="y", hit=3),
        seed=True,
    ),
    case(
        "fstrings",
        "FORMAT_VALUE BUILD_STRING",
        """
        def f(a, w):
            s1 = f"{a}"
            s2 = f"<{a!r:>{w}}>"
            return s1  # @A
        f(x, 12)
        """,
        Expect("A", "s1", producer="FORMAT_VALUE", inputs=("a",)),
        Expect("A", "s2", producer="BUILD_STRING"),
        seed=True,
    ),
    case(
        "imports",
        "IMPORT_NAME IMPORT_FROM IMPORT_STAR",
        """
        import sys
        import types
        mod = types.ModuleType("opcase_fake")
        mod.value = n * 1000
        sys.modules["opcase_fake"] = mod
        try:
            from opcase_fake import value as got
            import opcase_fake as again
            from opcase_fake import *
        finally:
            del sys.modules["opcase_fake"]
        done = 1  # @A
        """,
        Expect("A", "got", producer="BINARY_OP", same_as="mod.value"),
        Expect("A", "value", same_as="mod.value"),
        Expect("A", "again", producer="IMPORT_NAME"),
        seed=True,
    ),
    case(
        "print_expr",
        "PRINT_EXPR",
        """
        if True:
            import sys
            shown = []
            def hook(value):
                shown.append(value)
            saved = sys.displayhook
            sys.displayhook = hook
            try:
                v = len("abcdef") * 1000
                v
            finally:
                sys.displayhook = saved
            done = 1  # @A
        """,
        # The display hook (Python called from C) receives the value with its tag.
        Expect("A", "shown[0]", producer="BINARY_OP", same_as="v"),
        mode="single",
    ),
    case(
        "branches",
        "POP_JUMP_FORWARD_IF_FALSE POP_JUMP_FORWARD_IF_TRUE POP_JUMP_FORWARD_IF_NONE "
        "POP_JUMP_FORWARD_IF_NOT_NONE POP_JUMP_BACKWARD_IF_FALSE POP_JUMP_BACKWARD_IF_TRUE "
        "POP_JUMP_BACKWARD_IF_NONE POP_JUMP_BACKWARD_IF_NOT_NONE JUMP_IF_TRUE_OR_POP "
        "JUMP_IF_FALSE_OR_POP NOP IS_OP CONTAINS_OP COMPARE_OP",
        """
        def f(a, b, items):
            k = a
            while k is not None:
                k = None
            while k is None:
                k = a
            c = 2
            while c:
                c = c - 1
            while not c:
                c = c + 1
            if a:
                pass
            zero = 0
            either = zero or b
            both = a and b
            same = a is b
            inside = a in items
            big = a > b
            return either  # @A
        f(x, y, [x])
        """,
        Expect("A", "k", same_as="a"),
        Expect("A", "either", same_as="b"),
        Expect("A", "both", same_as="b"),
        Expect("A", "same", producer="IS_OP", inputs=("a", "b")),
        Expect("A", "inside", producer="CONTAINS_OP", inputs=("a", "items")),
        Expect("A", "big", producer="COMPARE_OP", inputs=("a", "b")),
        seed=True,
    ),
    case(
        "c_calls_python",
        "GET_ITER FOR_ITER KW_NAMES LOAD_METHOD YIELD_VALUE RETURN_GENERATOR",
        """
        xs = [n * 3000, n * 1000, n * 2000]
        keys = []
        def key(v):
            k = -v
            keys.append(k)
            return k  # @K
        def double(v):
            return v * 2
        ordered = sorted(xs, key=key)
        doubled = []
        for d in map(double, xs):
            doubled.append(d)
        total = sum(v for v in xs)
        done = 1  # @A
        """,
        Expect("A", "ordered", producer="CALL", inputs=("xs",), callbacks=("keys[0]",)),
        Expect("A", "doubled[0]", producer="BINARY_OP"),
        Expect("A", "total", producer="CALL", callbacks=("xs[0]",)),
        Expect("K", "v", same_as="xs[0]"),
        seed=True,
    ),
    case(
        "dunder",
        "BINARY_OP STORE_ATTR LOAD_ATTR",
        """
        class Money:
            def __init__(self, cents):
                self.cents = cents
            def __add__(self, other):
                mine = self.cents  # @B
                return Money(mine + other.cents)
        a = Money(x)
        b = Money(y)
        c = a + b
        done = 1  # @A
        """,
        # BINARY_OP calls __add__ from C: self and other keep their tags.
        Expect("B", "self", same_as="a"),
        Expect("B", "other", same_as="b"),
        Expect("A", "c", producer="CALL"),
        Expect("A", "c.cents", producer="BINARY_OP", inputs=("x", "y")),
        seed=True,
    ),
)
