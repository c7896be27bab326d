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
    id: str, opcodes: str, source: str, *expects: Expect, mode: str = "exec"
) -> OpcodeCase:
    return OpcodeCase(id, source, frozenset(opcodes.split()), expects, mode)


def code_opcodes(code: CodeType) -> set[str]:
    """The de-specialised opnames in `code` and every code object nested in its constants."""
    names = {ins.opname for ins in dis.get_instructions(code)}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= code_opcodes(const)
    return names


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
        Expect("A", "a", producer="LOAD_CONST"),
    ),
)
