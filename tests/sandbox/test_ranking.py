"""Candidate root causes in a trace: which literals are named configuration, and the order
(fewest hops, inputs before constants, then the earlier step)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from sealtrace.sandbox._ranking import NamedConstants, rank, slice_origins

SOURCE = textwrap.dedent(
    """\
    RATE = 0.2
    LIMITS = {"daily": 500}
    SIZES = [1, 2, 3]
    SQUARES = [n * n for n in (4, 5)]


    class Policy:
        fee = 250
        label = "std"

        class Inner:
            cap = -7

        def charge(self, amount, factor=3, *, floor=9):
            return round(amount * factor, 2) + 1


    def helper(x, per_kg=850,
               minimum=499):
        local = 42
        return x * local
    """
)
FILE = "/app/pricing.py"


def named(line: int, function: str, value: str) -> bool:
    return NamedConstants({FILE: SOURCE}).holds(FILE, line, function, value)


def test_module_and_class_attributes_are_named() -> None:
    assert named(1, "<module>", "0.2")
    assert named(2, "<module>", "500")
    assert named(3, "<module>", "(1, 2, 3)")  # a literal list is stored as a tuple
    assert named(8, "Policy", "250")
    assert named(9, "Policy", "'std'")
    assert named(12, "Policy.Inner", "-7")  # folded: -7 is one constant


def test_defaults_are_named_where_they_are_evaluated() -> None:
    assert named(14, "Policy", "(3,)")  # positional defaults folded on the def line
    assert named(14, "Policy", "9")  # a keyword-only default is its own constant
    assert named(18, "<module>", "(850, 499)")
    assert named(19, "<module>", "499")


def test_incidental_literals_are_not_named() -> None:
    assert not named(15, "Policy.charge", "2")  # round(x, 2)
    assert not named(15, "Policy.charge", "1")
    assert not named(20, "helper", "42")  # a local, not configuration
    assert not named(4, "<module>.<listcomp>", "4")
    assert not named(4, "<module>", "16")  # computed, not a literal
    assert not named(9, "Policy", "None")  # a class body's implicit `return None`
    assert not named(8, "<module>", "250")  # the right line, the wrong scope
    assert not named(1, "<module>", "0.3")  # the right line, another value
    assert not NamedConstants({}).holds(FILE, 1, "<module>", "0.2")


def node(
    counter: int,
    op: str,
    inputs: list[dict[str, Any]] | None = None,
    origin: str | None = None,
    line: int = 30,
    function: str = "main",
    value: str = "1",
) -> dict[str, Any]:
    return {
        "counter": counter,
        "file": FILE if counter else "",
        "line": line,
        "function": function,
        "op": op,
        "value": {"type": "int", "repr": value, "digest": ""},
        "origin": {"kind": origin, "call": None, "event": None} if origin else None,
        "inputs": inputs or [],
    }


def test_fewest_hops_first_counted_over_the_graph() -> None:
    # The read at 20 is expanded under the longer path first (the tree shows a step's inputs
    # once); its distance is still 2, through 30.
    read = node(20, "CALL fetchone", [node(15, "CALL execute", origin="external")], "external")
    rate = node(5, "LOAD_CONST 0.2", origin="constant", line=1, function="<module>", value="0.2")
    root = node(
        40,
        "BINARY_OP *",
        [
            node(35, "BINARY_OP +", [node(33, "BINARY_SUBSCR", [read])]),
            node(30, "BINARY_SUBSCR", [node(20, "CALL fetchone", origin="external")]),
            node(38, "BINARY_OP -", [rate]),
            node(39, "LOAD_CONST 2", origin="constant", line=15, function="Policy.charge"),
        ],
    )
    ranked = rank(root, NamedConstants({FILE: SOURCE}), program_root=None)
    assert [(c.where, c.hops, c.kind) for c in ranked] == [  # not the incidental 2 at hop 1
        (f"{FILE}:30", 2, "external"),  # inputs before constants at the same distance...
        (f"{FILE}:1", 2, "constant"),
        (f"{FILE}:30", 3, "external"),  # ...and how the read was fetched behind the read
    ]
    assert [c.counter for c in ranked] == [20, 5, 15]


def test_ties_go_to_the_earlier_step_and_seeded_origins_have_no_line() -> None:
    root = node(
        50,
        "BINARY_OP +",
        [
            node(44, "BINARY_SUBSCR", origin="env", line=31),
            node(0, "argv[2]", origin="argv", value="'7'"),
            node(12, "CALL file.readall", origin="external", line=32),
        ],
    )
    ranked = rank(root, NamedConstants({}))
    assert [c.where for c in ranked] == ["argv[2]", f"{FILE}:32", f"{FILE}:31"]
    assert ranked[0].value == "'7'"


def test_locations_inside_the_program_are_relative() -> None:
    root = node(9, "CALL fetchone", origin="external")
    assert rank(root, NamedConstants({}), program_root=None)[0].where == f"{FILE}:30"
    assert rank(root, NamedConstants({}), program_root=Path("/app"))[0].where == "pricing.py:30"


def test_a_slice_is_complete_only_when_every_leaf_is_an_origin() -> None:
    leaf = node(3, "LOAD_CONST 1", origin="constant")
    cut = node(4, "BINARY_OP +")  # produced by inputs the depth limit left out
    assert slice_origins(node(9, "BINARY_OP *", [leaf, leaf])) == ({"constant"}, True)
    assert slice_origins(node(9, "BINARY_OP *", [leaf, cut])) == ({"constant"}, False)
    # A step shown once, with its inputs, elsewhere in the tree is not a cut.
    shown = node(4, "BINARY_OP +", [leaf])
    assert slice_origins(node(9, "BINARY_OP *", [shown, cut])) == ({"constant"}, True)
