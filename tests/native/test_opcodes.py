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
    outputs: dict[int, list[int]] = field(default_factory=dict)
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
    if frame.f_code.co_flags & 0x1:  # CO_OPTIMIZED: fast locals and cells
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


def run_case(case: OpcodeCase, stop: tuple[Expect, tuple[str, ...]] | None = None) -> Run:
    """Run the case's program; at `stop`, read the tags of the named expressions."""
    code = case.compile()
    engine = Engine(_own(case))
    seen: dict[str, int] = {}
    stopped = False

    def at_stop(frame: FrameType, _counter: int) -> None:
        nonlocal stopped
        stopped = True
        assert stop is not None
        for expr in stop[1]:
            seen[expr] = _read(engine, frame, expr)

    if stop is not None:
        engine.stop_at_line(case.filename, case.line(stop[0].at), stop[0].hit, at_stop)
    with _attached(engine):
        exec(code, _globals(case))  # noqa: S102 - the case's own program, compiled above
    assert stop is None or stopped, f"{case.id}: never reached @{stop[0].at}"
    return Run(engine.stats(), engine.counter, seen if stop is not None else None)


def capture_case(case: OpcodeCase, counters: list[int]) -> Capture:
    """Run the case's program capturing `counters` (all of them: every executed opname)."""
    code = case.compile()
    engine = Engine(_own(case))
    out = Capture()

    def pre(frame: FrameType, counter: int, index: int, inputs: list[tuple[Any, int]]) -> None:
        unit, opname = _instruction_at(frame.f_code, index)
        out.executed.update((unit, opname))
        out.opname[counter] = opname
        out.inputs[counter] = [t for _, t in inputs]

    def post(counter: int, outputs: list[tuple[Any, int]], _raised: bool, cbs: Any) -> None:
        out.outputs[counter] = [t for _, t in outputs]
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
    where = f"{case.id} @{expect.at}: {expect.expr}"
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
    assert capture.opname[tag] == expect.producer or expect.producer is None, (
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


# -- the table ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: OpcodeCase) -> None:
    code = case.compile()
    missing = case.opcodes - code_opcodes(code)
    assert not missing, f"{case.id} claims opcodes its code does not contain: {sorted(missing)}"
    assert case.expects, f"{case.id} asserts nothing about provenance"
    assert not (case.opcodes & NOT_TRACED) or case.expects

    first = run_case(case)
    assert first.stats["depth_mismatches"] == 0, first.stats
    assert first.stats["mismatches_by_op"] == {}, first.stats
    assert first.stats["callback_errors"] == 0, first.stats

    capture = capture_case(case, list(range(1, first.counter + 1)))
    not_run = case.opcodes - NOT_TRACED - capture.executed
    assert not not_run, f"{case.id} never executed {sorted(not_run)}"

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


def test_engine_pops_match_the_compiler() -> None:
    # What an instruction consumes plus what it reads below is never less than it removes.
    for op, name, _rule, _more in opcode_table():
        if op < dis.HAVE_ARGUMENT:
            args = [0]
        else:
            args = [0, 1, 2, 3, 5, 8, 15]
        for arg in args:
            pops, peeks = op_inputs(op, arg)
            assert pops >= 0 and peeks >= 0, name


# -- negative controls ----------------------------------------------------------------------


def test_a_claimed_opcode_the_code_lacks_is_refused() -> None:
    wrong = OpcodeCase("lying", "x = 1\n", frozenset({"BINARY_OP"}), ())
    assert "BINARY_OP" not in code_opcodes(wrong.compile())


def test_a_move_is_not_its_own_producer() -> None:
    # If moves made new tags, `b = c` would be produced by STORE_FAST/LOAD_FAST.
    case = CASES[0]
    with pytest.raises(AssertionError, match="produced by BINARY_OP"):
        check_expect(case, Expect("A", "b", producer="STORE_FAST"))
    with pytest.raises(AssertionError, match="is not an input"):
        check_expect(case, Expect("A", "b", producer="BINARY_OP", inputs=("b",)))


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
