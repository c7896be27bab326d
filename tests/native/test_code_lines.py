"""Each instruction's line, as the engine reads it from the code object's line table (once,
forward, when it first meets the code: code_info.cpp's LineCursor), is the line CPython gives
it: a line stop anywhere in a long code object — past loops whose jumps go back, statements
spanning several lines, handlers and nested blocks — stops on that line, and a line with no
instruction never stops.
"""

from __future__ import annotations

from types import CodeType
from typing import Any

import pytest

from sealtrace._engine import Engine

from .test_opcodes import _attached

FILE = "<lines>"


def _program(blocks: int) -> str:
    """A module body of several thousand instructions, every statement of it executed."""
    out = ["total = 0"]
    for i in range(blocks):
        out += [
            f"a{i} = {i} * 3",
            f"for k in range(2):  # block {i}",
            f"    total += a{i} + k",
            "    if k:",
            "        total -= 1",
            f"b{i} = max(",
            f"    a{i},",
            "    total,",
            ")",
            "try:",
            f"    c{i} = b{i} // (k - 1)",
            "except ZeroDivisionError:",
            f"    c{i} = -1",
            "",
            f"# a comment after block {i}",
        ]
    return "\n".join(out) + "\n"


def _code_lines(code: CodeType) -> set[int]:
    return {line for _, _, line in code.co_lines() if line is not None and line > 0}


def _stopped_on(code: CodeType, line: int, *, eval_loop: bool) -> list[int]:
    engine = Engine(lambda filename: filename != FILE, eval_loop=eval_loop)
    seen: list[int] = []

    def at(frame: Any, _counter: int) -> None:
        seen.append(frame.f_lineno)

    engine.stop_at_line(FILE, line, 1, at)
    with _attached(engine):
        exec(code, {"__name__": "lines"})  # noqa: S102 - the program above
    return seen


@pytest.mark.parametrize("eval_loop", [True, False], ids=["loop", "trace_callback"])
def test_a_line_stop_anywhere_in_a_long_code_object_stops_on_its_line(eval_loop: bool) -> None:
    source = _program(40)
    code = compile(source, FILE, "exec")
    assert len(code.co_code) // 2 > 2000  # long enough that a wrong position would show
    with_code = _code_lines(code)
    lines = source.splitlines()
    checked = 0
    for number in range(1, len(lines) + 1):
        stops = _stopped_on(code, number, eval_loop=eval_loop)
        if number in with_code:
            assert stops == [number], (number, lines[number - 1])
            checked += 1
        else:  # a blank line, a comment, a lone closing bracket: no instruction is on it
            assert stops == [], (number, lines[number - 1])
    assert checked > 400
