"""Opcode coverage: every CPython 3.11 opcode has a modelled stack effect and provenance rule,
each checked by a table-driven case (tests/native/opcode_cases.py).

Each case's program runs in-process under a fresh engine that traces only the case's file:
once to stop at a line and read tags, once to capture the instructions those tags name and
every executed instruction. Counters are deterministic across runs of the same code.
"""

from __future__ import annotations

import ast
import contextlib
import dis
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

import pytest

from sealtrace._engine import Engine, op_inputs, opcode_table

from .opcode_cases import ALL_OPCODES, CASES, NOT_TRACED, Expect, OpcodeCase, code_opcodes

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "native" / "opcode_coverage.py"
DOC = REPO / "docs" / "opcodes.md"

_EXPR = re.compile(r"^(\w+)(?:\.(\w+)|\[(.+)\])?$")
_MISSING = object()


@dataclass
class Capture:
    """What a capture run saw: every executed opname, and the instructions asked for."""

    executed: set[str] = field(default_factory=set)
    opname: dict[int, str] = field(default_factory=dict)
    inputs: dict[int, list[int]] = field(default_factory=dict)
    callbacks: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Run:
    stats: dict[str, Any]
    counter: int
    tags: dict[str, int] | None


def _instruction_at(code: CodeType, index: int) -> tuple[str, str]:
    """(opname at the unit, opname of the instruction it belongs to): EXTENDED_ARG prefixes
    the instruction the engine models at the same counter."""
    raw = code.co_code
    first = dis.opname[raw[2 * index]]
    while dis.opname[raw[2 * index]] == "EXTENDED_ARG":
        index += 1
    return first, dis.opname[raw[2 * index]]


def _read(engine: Engine, frame: FrameType, expr: str) -> int:
    """The tag of `expr` in `frame`, or a test failure if it cannot be read."""
    m = _EXPR.match(expr)
    assert m, f"bad expression {expr!r}"
    name, attr, key_text = m.groups()
    value: Any = _MISSING
    tag = 0
    if frame.f_code.co_flags & inspect.CO_OPTIMIZED:  # fast locals and cells
        for local, v, t in engine.frame_locals(frame):
            if local == name:
                value, tag = v, t
    else:
        namespace = frame.f_locals
        if name in namespace:
            value = namespace[name]
            tag = engine.item_tag(namespace, name, value)
    if value is _MISSING and name in frame.f_globals:
        value = frame.f_globals[name]
        tag = engine.item_tag(frame.f_globals, name, value)
    assert value is not _MISSING, f"{name} is not bound at the stop"
    if attr is not None:
        tag = engine.attr_tag(value, attr, getattr(value, attr))
    elif key_text is not None:
        key = ast.literal_eval(key_text)
        tag = engine.item_tag(value, key, value[key])
    return tag


def _globals(case: OpcodeCase) -> dict[str, Any]:
    return {"__name__": f"opcase_{case.id}", "__file__": case.filename}


def _own(case: OpcodeCase) -> Callable[[str], bool]:
    return lambda filename: filename != case.filename


@contextlib.contextmanager
def _attached(engine: Engine) -> Iterator[None]:
    engine.attach()
    try:
        yield
    finally:
        engine.detach()


def run_case(
    case: OpcodeCase,
    stop: tuple[Expect, tuple[str, ...]] | None = None,
    *,
    eval_loop: bool = True,
) -> Run:
    """Run the case's program; at `stop`, read the tags of the named expressions."""
    code = case.compile()
    engine = Engine(_own(case), eval_loop=eval_loop)
    seen: dict[str, int] = {}
    stopped = False
    failure: list[BaseException] = []

    def at_stop(frame: FrameType, _counter: int) -> None:
        nonlocal stopped
        stopped = True
        assert stop is not None
        try:
            for expr in stop[1]:
                seen[expr] = _read(engine, frame, expr)
        except BaseException as exc:  # the engine would only print it: re-raised below
            failure.append(exc)

    if stop is not None:
        engine.stop_at_line(case.filename, case.line(stop[0].at), stop[0].hit, at_stop)
    with _attached(engine):
        exec(code, _globals(case))  # noqa: S102 - the case's own program, compiled above
    if failure:
        raise failure[0]
    assert stop is None or stopped, f"{case.id}: never reached @{stop[0].at}"
    return Run(engine.stats(), engine.counter, seen if stop is not None else None)


def capture_case(case: OpcodeCase, counters: list[int], *, eval_loop: bool = True) -> Capture:
    """Run the case's program capturing `counters` (all of them: every executed opname)."""
    code = case.compile()
    engine = Engine(_own(case), eval_loop=eval_loop)
    out = Capture()

    def pre(frame: FrameType, counter: int, index: int, inputs: list[tuple[Any, int]]) -> None:
        unit, opname = _instruction_at(frame.f_code, index)
        out.executed.update((unit, opname))
        out.opname[counter] = opname
        out.inputs[counter] = [t for _, t in inputs]

    def post(
        counter: int, _outputs: list[tuple[Any, int]], _raised: bool, cbs: Any, _move: bool
    ) -> None:
        # Every input the engine records (callbacks among them), and whether it is a move.
        out.callbacks[counter] = list(cbs or ())

    engine.capture(counters, pre, post)
    with _attached(engine):
        exec(code, _globals(case))  # noqa: S102 - the case's own program, compiled above
    return out


def expression_names(expect: Expect) -> tuple[str, ...]:
    names = [expect.expr, *expect.inputs, *expect.callbacks, *expect.differs]
    if expect.same_as is not None:
        names.append(expect.same_as)
    return tuple(dict.fromkeys(names))


def check_expect(case: OpcodeCase, expect: Expect, capture: Capture | None = None) -> None:
    """Fail unless the engine's tags at the stop satisfy `expect`."""
    run = run_case(case, (expect, expression_names(expect)))
    assert run.tags is not None
    tags = run.tags
    tag = tags[expect.expr]
    where = f"{case.id} @{expect.at}#{expect.hit}: {expect.expr}"
    assert tag != 0, f"{where} has no tag"
    if expect.same_as is not None:
        assert tag == tags[expect.same_as], f"{where} tag {tag} != {expect.same_as}'s"
    for other in expect.differs:
        assert tag != tags[other], f"{where} shares its tag {tag} with {other}"
    if expect.producer is None and not expect.inputs and not expect.callbacks:
        return
    if capture is None or tag not in capture.opname:
        capture = capture_case(case, [tag])
    assert tag in capture.opname, f"{where}: counter {tag} was never executed"
    if expect.producer is not None:
        assert capture.opname[tag] == expect.producer, (
            f"{where} was produced by {capture.opname[tag]}, not {expect.producer}"
        )
    for other in expect.inputs:
        assert tags[other] != 0, f"{case.id}: {other} has no tag"
        assert tags[other] in capture.inputs[tag], (
            f"{where}: {other} (tag {tags[other]}) is not an input of {capture.opname[tag]} "
            f"(inputs {capture.inputs[tag]})"
        )
    for other in expect.callbacks:
        assert tags[other] != 0, f"{case.id}: {other} has no tag"
        assert tags[other] in capture.callbacks.get(tag, []), (
            f"{where}: {other} (tag {tags[other]}) did not flow into {capture.opname[tag]} "
            f"from a callback (callbacks {capture.callbacks.get(tag)})"
        )


def check_claims(case: OpcodeCase) -> Capture:
    """Fail unless the case's code contains and executes every opcode it claims, with no
    stack-depth mismatch anywhere; returns the capture of every executed instruction."""
    missing = case.opcodes - code_opcodes(case.compile())
    assert not missing, f"{case.id} claims opcodes its code does not contain: {sorted(missing)}"
    run = run_case(case)
    assert run.stats["depth_mismatches"] == 0, run.stats
    assert run.stats["mismatches_by_op"] == {}, run.stats
    assert run.stats["callback_errors"] == 0, run.stats
    capture = capture_case(case, list(range(1, run.counter + 1)))
    not_run = case.opcodes - NOT_TRACED - capture.executed
    assert not not_run, f"{case.id} never executed {sorted(not_run)}"
    return capture


# -- the table ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: OpcodeCase) -> None:
    # Opcodes that run before the first opcode event are proven by their effect alone.
    assert case.expects, f"{case.id} asserts nothing about provenance"
    capture = check_claims(case)
    for expect in case.expects:
        check_expect(case, expect, capture)


def test_cases_cover_every_opcode() -> None:
    claimed = set().union(*(c.opcodes for c in CASES))
    assert claimed - ALL_OPCODES == set()
    assert sorted(ALL_OPCODES - claimed) == []


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


def test_engine_table_matches_dis() -> None:
    table = {name: op for op, name, _rule, _more in opcode_table()}
    assert table == {name: dis.opmap[name] for name in ALL_OPCODES}


# Opargs the compiler emits for BUILD_SLICE; every other opcode takes any probe.
_VALID_ARGS = {"BUILD_SLICE": (2, 3)}
_PROBES = (0, 1, 2, 3, 4, 5, 8, 15, 256, 257)


def test_modelled_inputs_cover_what_each_instruction_removes() -> None:
    # An instruction cannot remove more stack values than it consumes and reads.
    for op, name, _rule, _more in opcode_table():
        if op < dis.HAVE_ARGUMENT:
            args: tuple[int | None, ...] = (None,)
        else:
            args = _VALID_ARGS.get(name, _PROBES)
        for arg in args:
            removed = max(-dis.stack_effect(op, arg, jump=j) for j in (False, True))
            pops, peeks = op_inputs(op, arg or 0)
            assert pops >= 0 and peeks >= 0, name
            assert pops + peeks >= removed, f"{name} {arg}: {pops}+{peeks} < {removed}"


# -- negative controls ----------------------------------------------------------------------


def test_a_claimed_opcode_the_code_lacks_is_refused() -> None:
    lying = OpcodeCase("lying", "x = 1\n", frozenset({"BINARY_OP"}), ())
    with pytest.raises(AssertionError, match="does not contain"):
        check_claims(lying)


def test_a_claimed_opcode_that_never_runs_is_refused() -> None:
    dead = OpcodeCase("dead", "def never(a):\n    return a * 2\n", frozenset({"BINARY_OP"}), ())
    with pytest.raises(AssertionError, match="never executed"):
        check_claims(dead)


def test_a_move_is_not_its_own_producer() -> None:
    # If moves made new tags, `b = c` would be produced by STORE_FAST/LOAD_FAST.
    case = CASES[0]
    with pytest.raises(AssertionError, match="produced by BINARY_OP"):
        check_expect(case, Expect("A", "b", producer="STORE_FAST"))
    with pytest.raises(AssertionError, match="is not an input"):
        check_expect(case, Expect("A", "b", producer="BINARY_OP", inputs=("b",)))
    with pytest.raises(AssertionError, match="not bound"):
        check_expect(case, Expect("A", "nowhere", producer="BINARY_OP"))


def test_an_unpacked_item_is_not_its_tuple() -> None:
    case = next(c for c in CASES if c.id == "tuples")
    with pytest.raises(AssertionError, match="!= t's"):
        check_expect(case, Expect("A", "p", same_as="t"))
    with pytest.raises(AssertionError, match="shares its tag"):
        check_expect(case, Expect("A", "p", differs=("p0",)))


_UNSEEN = """\
def g():
    return 1
def f(a):
    s = [a, a, a]
    t = (s, a + 1)
    r = g()
    u = a * 3
    return u  # @A
res = f(len("abcdef") * 1000)
"""


def test_a_depth_mismatch_is_counted_and_tracing_goes_on() -> None:
    # Opcode events switched off for part of f (as another tool might): the instruction
    # pending then completes at a depth its model does not explain. The engine counts the
    # mismatch, resynchronises with the real stack and tags what follows correctly.
    case = OpcodeCase("unseen", _UNSEEN, frozenset(), ())
    seen: dict[str, int] = {}

    def at_s(frame: FrameType, counter: int) -> None:
        seen["counter"] = counter
        seen.update((name, tag) for name, _v, tag in engine.frame_locals(frame))

    engine = Engine(_own(case))
    engine.stop_at_line(case.filename, case.line("A") - 4, 1, at_s)  # `s = [a, a, a]`
    with _attached(engine):
        exec(case.compile(), _globals(case))  # noqa: S102 - the program above
    assert seen["a"] != 0

    def silenced(capture: list[int] | None) -> tuple[Engine, dict[str, Any], Capture]:
        def silence(frame: FrameType, _counter: int) -> None:
            frame.f_trace_opcodes = False

        def resume(frame: FrameType, _counter: int) -> None:
            assert frame.f_back is not None
            frame.f_back.f_trace_opcodes = True  # from g, called by f

        out = Capture()

        def pre(_f: FrameType, counter: int, _i: int, inputs: list[tuple[Any, int]]) -> None:
            out.inputs[counter] = [t for _, t in inputs]
            out.opname[counter] = _instruction_at(_f.f_code, _i)[1]

        eng = Engine(_own(case))
        eng.stop_at_counter(seen["counter"] + 1, silence)
        eng.stop_at_line(case.filename, 2, 1, resume)
        if capture:
            eng.capture(capture, pre, lambda *_args: None)
        namespace = _globals(case)
        with _attached(eng):
            exec(case.compile(), namespace)  # noqa: S102 - the program above
        assert namespace["res"] == 18000
        return eng, namespace, out

    eng, namespace, _ = silenced(None)
    stats = eng.stats()
    assert stats["depth_mismatches"] == 1, stats
    assert sum(stats["mismatches_by_op"].values()) == 1, stats
    assert stats["callback_errors"] == 0, stats
    res = eng.item_tag(namespace, "res", namespace["res"])
    _, _, capture = silenced([res])
    assert capture.opname[res] == "BINARY_OP"
    assert capture.inputs[res][0] == seen["a"]


# -- the generated table --------------------------------------------------------------------


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_opcode_coverage", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_docs_table_is_current() -> None:
    expected = _generator().render()
    assert DOC.read_text(encoding="utf-8") == expected, (
        "docs/opcodes.md is stale: run .venv/bin/python native/opcode_coverage.py"
    )
