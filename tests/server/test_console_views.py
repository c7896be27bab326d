"""What the console's provenance view makes of the answers (server/_console/_views.py and
_walk.py), on answers shaped as the pricing story's are: operands computed on a step's own
line are folded into it; an operand a local holds is named after it; only expressions of the
step's own function that start at one of its locals become buttons; and a walk goes back and
forth as a browser's history does. The real answers, in a real browser: tests/e2e."""

from __future__ import annotations

from typing import Any

import pytest

from sealtrace.server._console._trail import MAX_VIEWS, Step, Trail
from sealtrace.server._console._views import describe_step, short_path
from sealtrace.server._console._walk import follow, show, trace
from sealtrace.server._errors import ActionRefused
from sealtrace.server._settings import ServerSettings

PRICING = "/app/services/pricing.py"
PROMOTIONS = "/app/services/promotions.py"
SOURCE = [
    "from dataclasses import dataclass",
    "",
    "",
    "def calculate_total(items, discount):",
    "    subtotal = sum(i.price for i in items)",
    "    total = subtotal * (1 - discount)",
    "    return round(total, 2)",
    "",
    "",
    "def other(order):",
    "    return order.total_price",
]


def _value(text: str | None, kind: str = "float") -> dict[str, Any]:
    return {"type": kind, "repr": text, "digest": "ab" * 32}


def _node(counter: int, file: str, line: int, op: str, value: str | None, *inputs: Any,
          origin: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"counter": counter, "file": file, "line": line, "function": "calculate_total"
            if file == PRICING else "get_discount", "op": op, "value": _value(value),
            "origin": origin, "inputs": list(inputs)}  # fmt: skip


CONSTANT = {"kind": "constant", "call": None, "event": None}
READ = {"kind": "external", "call": "sqlite3.Cursor.fetchone", "event": 44}
FETCH = _node(90, PROMOTIONS, 4, "CALL sqlite3.Cursor.fetchone", "(100,)", origin=READ)
DIVIDE = _node(95, PROMOTIONS, 5, "BINARY_OP /", "1.0",
               _node(93, PROMOTIONS, 5, "BINARY_SUBSCR", "100", FETCH),
               _node(94, PROMOTIONS, 5, "LOAD_CONST 100", "100", origin=CONSTANT))  # fmt: skip
ONE = _node(118, PRICING, 6, "LOAD_CONST 1", "1", origin=CONSTANT)
PRODUCT = _node(120, PRICING, 6, "BINARY_OP *", "0.0",
                _node(110, PRICING, 5, "CALL sum", "49.99"),
                _node(119, PRICING, 6, "BINARY_OP -", "0.0", ONE, DIVIDE))  # fmt: skip
ROUND = _node(125, PRICING, 7, "CALL round", "0.0", PRODUCT,
              _node(124, PRICING, 7, "LOAD_CONST 2", "2", origin=CONSTANT))  # fmt: skip
TRACE = {"query": {"value": _value("0.0")}, "root": ROUND}


def _stack(counter: int, line: int, **locals_: tuple[str | None, int]) -> dict[str, Any]:
    return {"query": {"at": str(counter), "counter": counter},
            "frames": [{"file": PRICING, "line": line, "function": "calculate_total",
                        "locals": [{"name": n, "value": _value(v), "tag": t}
                                   for n, (v, t) in locals_.items()]}]}  # fmt: skip


def _asker(answers: dict[str, Any]) -> Any:
    asked: list[dict[str, Any]] = []

    def ask(question: dict[str, Any]) -> dict[str, Any]:
        asked.append(question)
        return answers[question["kind"]] if question["kind"] != "inspect-stack" else (
            _stack(int(question["at"]), 6, subtotal=("49.99", 110), discount=("1.0", 95),
                   items=(None, 20), total=("0.0", 120)))  # fmt: skip

    ask.asked = asked  # type: ignore[attr-defined]
    return ask


def test_operands_of_the_same_line_are_folded_and_named_after_their_locals() -> None:
    trail = Trail(owner=1)
    trail.add(Step(200, _stack(200, 11, order=(None, 7)), "The last output", "landing"), None)
    ask = _asker({"trace": TRACE})
    at_round = trace(ask, trail, 0, 200, "order.total_price")
    assert ask.asked[0] == {"kind": "trace", "at": "200", "var": "order.total_price",
                            "depth": 64}  # fmt: skip
    assert trail.views[at_round].label == "order.total_price = 0.0"
    at_product = follow(ask, trail, at_round, (0,))
    assert trail.views[at_product].label == "total = 0.0"  # the local holding it is named
    view = describe_step(trail, trail.views[at_product], {PRICING: SOURCE})  # type: ignore[arg-type]
    assert [(c.op, c.value) for c in view.computed] == [("BINARY_OP -", "0.0")]
    assert [(o.name, o.value, o.op, o.followable) for o in view.operands] == [
        ("subtotal", "49.99", "CALL sum", True),
        ("", "1", "LOAD_CONST 1", True),
        ("discount", "1.0", "BINARY_OP /", True),
    ]
    assert (
        view.operands[2].path == "0.1.1" and view.operands[1].origin == "a constant in the source"
    )
    # The promotions step: the read is an operand, an external input.
    at_divide = follow(ask, trail, at_product, (0, 1, 1))
    view = describe_step(trail, trail.views[at_divide], {})
    assert [o.value for o in view.operands] == ["(100,)", "100"]
    assert view.operands[0].origin == "external input: sqlite3.Cursor.fetchone (event 44)"
    with pytest.raises(ActionRefused):
        follow(ask, trail, at_divide, (5, 5))


def test_only_the_functions_own_expressions_on_its_locals_are_buttons() -> None:
    trail = Trail(owner=1)
    step = Step(120, _stack(120, 6, subtotal=("49.99", 110), discount=("1.0", 95)), "x", "goto")
    trail.add(step, None)
    view = describe_step(trail, step, {PRICING: SOURCE})
    buttons = {n.number: [s.expr for s in n.segments if s.expr] for n in view.lines}
    assert buttons[6] == ["subtotal", "discount"]  # total is no local yet: plain text
    assert buttons[11] == []  # another function's line: order is not this frame's
    marked = [n.number for n in view.lines if n.marked]
    assert marked == [6] and "".join(s.text for s in view.lines[5].segments) == SOURCE[5]
    # An outer frame's values are shown, not traced.
    assert describe_step(trail, step, {PRICING: SOURCE}, frame=0).traceable


def test_a_jump_from_an_earlier_view_drops_the_later_ones() -> None:
    trail = Trail(owner=1)
    for i in range(4):
        trail.add(Step(i + 1, None, f"v{i}", "goto"), i - 1 if i else None)
    assert trail.add(Step(9, None, "again", "goto"), 1) == 2
    assert [v.label for v in trail.views] == ["v0", "v1", "again"]
    for i in range(MAX_VIEWS + 5):
        trail.add(Step(i + 10, None, f"w{i}", "goto"), len(trail.views) - 1)
    assert len(trail.views) == MAX_VIEWS


def test_values_show_as_the_api_shows_them() -> None:
    assert show(_value("'STAFF100'", "str")) == "'STAFF100'"
    assert show(_value(None, "dict")) == "dict #abababab"
    assert show(_value(None, "?")) == "value #abababab"
    assert short_path("/srv/app/services/pricing.py") == "services/pricing.py"
    assert short_path("") == "library code"


def test_console_time_outs_must_make_sense() -> None:
    with pytest.raises(ValueError, match="console_idle_timeout"):
        ServerSettings(console_idle_timeout=100, console_absolute_timeout=50).check()
    with pytest.raises(ValueError, match="console_idle_timeout"):
        ServerSettings(console_idle_timeout=0).check()
    assert ServerSettings(environment="development").console_cookies_secure is False
    assert ServerSettings(console_secure_cookies=True).console_cookies_secure is True
