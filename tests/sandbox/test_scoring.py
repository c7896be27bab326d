"""The corpus's scoring (sealtrace.sandbox._scoring) on answers written by hand: each verdict,
precision and recall, and the cases that must count against an answer (a constant standing
in for an input, a key, a decoy inside the slice) or must not (a library's literal, a branch
the engine could not follow); and the forward truth's scoring of the outputs a flow names."""

from __future__ import annotations

from typing import Any

import pytest

from sealtrace.sandbox._scoring import (
    EventFacts,
    Placed,
    Recorded,
    score,
    score_flows,
    unanswered,
)
from sealtrace.sandbox.validation.truth import Mark, argv, constant, env, external, line, output

ROOT = "/scratch/program"
LIB = "/usr/lib/python3.11/json/decoder.py"

# Events 0-3: a connect, the row read by app.py:20 (inside a library), a stray read, the decoy.
EVENTS = [
    EventFacts("sqlite3.connect", False, "None", "app.py:18"),
    EventFacts("sqlite3.Cursor.fetchone", False, "('north', 120)", "app.py:20"),
    EventFacts("sqlite3.Cursor.execute", False, "(('region', None),)", "app.py:20"),
    EventFacts("file.read", False, "banner text", "app.py:30"),
]
REC = Recorded(ROOT, EVENTS, {"RATE": ["app.py:22"]})


def node(
    counter: int,
    op: str,
    *inputs: dict[str, Any],
    file: str = f"{ROOT}/app.py",
    line: int = 40,
    origin: str | None = None,
    event: int | None = None,
    value: str | None = None,
    call: str | None = None,
) -> dict[str, Any]:
    return {
        "counter": counter,
        "file": file,
        "line": line,
        "function": "main",
        "op": op,
        "value": {"type": "x", "repr": value, "digest": ""},
        "origin": None if origin is None else {"kind": origin, "call": call, "event": event},
        "inputs": list(inputs),
    }


def placed(role: str, mark: Mark, where: str) -> Placed:
    return Placed(role, mark, where)


TRUTH = [
    placed("origin", external("row", "north"), "app.py:20"),
    placed("origin", env("rate"), "app.py:22"),
    placed("origin", constant("fee", "250"), "app.py:8"),
    placed("allow", external("db"), "app.py:18"),
    placed("allow", constant("half", "2"), "app.py:41"),
    placed("allow", argv(1), "argv[1]"),
    placed("decoy", line("banner"), "app.py:30"),
]


def right_answer() -> dict[str, Any]:
    row = node(
        50,
        "CALL fetchone",
        node(10, "CALL sqlite3.connect", node(0, "argv[1]", file="", line=0, origin="argv"),
             line=18, origin="external", event=0),
        file=f"{ROOT}/lib.py", line=99, origin="external", event=1, value="('north', 120)",
    )  # fmt: skip
    rate = node(60, "BINARY_SUBSCR", line=22, origin="env", call="os.environ['RATE']")
    fee = node(5, "LOAD_CONST 250", line=8, origin="constant", value="250")
    half = node(70, "LOAD_CONST 2", line=41, origin="constant", value="2")
    return {"root": node(90, "BINARY_OP *", row, rate, fee, half)}


def test_a_right_answer_scores_one_and_one() -> None:
    s = score(right_answer(), TRUTH, REC)
    assert (s.precision, s.recall) == (1.0, 1.0)
    verdicts = {(n.kind, n.where): n.verdict for n in s.named}
    # The row read inside a library counts at the program line that asked for it.
    assert verdicts[("external", "app.py:20")] == "origin"
    assert verdicts[("external", "app.py:18")] == "allowed"
    assert verdicts[("argv", "argv[1]")] == "allowed"
    assert verdicts[("constant", "app.py:41")] == "allowed"
    assert [e.event for e in s.expected if e.kind == "external"] == [1]


def test_a_constant_standing_in_for_the_inputs_is_a_false_positive() -> None:
    """sum() over an appended list answered as the [] literal: the confident wrong answer."""
    answer = {
        "root": node(90, "CALL sum", node(9, "BUILD_LIST", line=25, origin="constant", value="[]"))
    }
    s = score(answer, TRUTH, REC)
    assert [(n.verdict, n.where) for n in s.named] == [("unexpected-constant", "app.py:25")]
    assert s.precision == 0.0
    assert s.recall == 0.0
    assert s.found == 0 and len(s.expected) == 3


def test_a_constant_at_an_inputs_line_is_not_that_input() -> None:
    answer = {
        "root": node(
            90, "BINARY_SUBSCR", node(9, "LOAD_CONST 0", line=20, origin="constant", value="0")
        )
    }
    s = score(answer, TRUTH, REC)
    assert [n.verdict for n in s.named] == ["unexpected-constant"]


def test_a_library_literal_is_not_judged_and_unknown_costs_only_recall() -> None:
    answer = {
        "root": node(
            90,
            "BINARY_OP *",
            node(8, "LOAD_CONST 0", file=LIB, line=337, origin="constant", value="0"),
            node(7, "?", file="", line=0, origin="unknown"),
            node(6, "CALL f", node(5, "CALL g")),  # left unexpanded: cut by the depth
        )
    }
    s = score(answer, TRUTH, REC)
    assert [n.verdict for n in s.named] == ["library-constant"]
    assert s.judged == 0 and s.precision is None
    assert (s.unknown, s.cut) == (1, 1)
    assert s.recall == 0.0


def test_other_events_of_an_origins_line_are_how_it_was_fetched() -> None:
    answer = right_answer()
    answer["root"]["inputs"].append(node(48, "CALL execute", line=20, origin="external", event=2))
    s = score(answer, TRUTH, REC)
    assert {n.event: n.verdict for n in s.named if n.kind == "external"}[2] == "allowed"
    assert s.precision == 1.0


def test_decoys_count_as_origins_and_inside_the_slice() -> None:
    as_origin = right_answer()
    as_origin["root"]["inputs"].append(node(80, "CALL read", line=30, origin="external", event=3))
    s = score(as_origin, TRUTH, REC)
    assert [n.where for n in s.named if n.verdict == "decoy"] == ["app.py:30"]
    assert s.precision == pytest.approx(6 / 7)

    inside = right_answer()
    inside["root"]["inputs"].append(node(81, "CALL str.upper", line=30))
    s = score(inside, TRUTH, REC)
    assert s.leaked == ["banner"]
    assert s.precision == pytest.approx(6 / 7)


def test_an_input_the_truth_does_not_name_is_wrong() -> None:
    answer = right_answer()
    answer["root"]["inputs"].append(node(0, "argv[2]", file="", line=0, origin="argv"))
    s = score(answer, TRUTH, REC)
    assert [n.verdict for n in s.named if n.kind == "argv" and n.where == "argv[2]"] == [
        "unexpected-input"
    ]


def test_value_filters_pick_the_events_of_a_line() -> None:
    truth = [placed("origin", external("row", "south"), "app.py:20")]
    with pytest.raises(ValueError, match="names no recorded event"):
        score(right_answer(), truth, REC)


def test_identical_origins_count_once_and_no_answer_misses_everything() -> None:
    fee = node(5, "LOAD_CONST 250", line=8, origin="constant", value="250")
    again = node(6, "LOAD_CONST 250", line=8, origin="constant", value="250")
    s = score({"root": node(90, "BINARY_OP +", fee, again)}, TRUTH, REC)
    assert len(s.named) == 1
    missed = unanswered(TRUTH, REC)
    assert (missed.found, len(missed.expected), missed.precision) == (0, 3, None)


def test_flows_are_scored_by_the_outputs_they_name() -> None:
    events = [
        EventFacts("file.read", False, "ines@example.no", "app.py:10"),
        EventFacts("file.write", False, "32", "app.py:20", written="INFO ines@example.no\n"),
        EventFacts("stdout.write", False, "27", "app.py:20", written="INFO ines@example.no\n"),
        EventFacts("stdout.write", False, "20", "app.py:20", written="INFO tom@example.no\n"),
        EventFacts("stdout.write", False, "9", "app.py:30", written="2 signups"),
    ]
    rec = Recorded(ROOT, events)
    reaches = [placed("flow", output("log", "ines@"), "app.py:20")]
    avoids = [
        placed("flow", output("log", "tom@"), "app.py:20"),
        placed("flow", output("count"), "app.py:30"),
    ]
    lost = score_flows([], reaches, avoids, rec)  # "reached 0 outputs"
    assert (lost.precision, lost.recall) == (None, 0.0)
    exact = score_flows([1, 2], reaches, avoids, rec)
    assert (exact.precision, exact.recall) == (1.0, 1.0)
    leaky = score_flows([1, 2, 3, 4], reaches, avoids, rec)
    assert leaky.reached == [(1, "reaches"), (2, "reaches"), (3, "avoids"), (4, "avoids")]
    assert (leaky.precision, leaky.recall) == (0.5, 1.0)
    with pytest.raises(ValueError, match="names no output"):
        score_flows([], [placed("flow", output("log", "ada@"), "app.py:20")], [], rec)


def test_a_root_that_made_another_value_is_wrong() -> None:
    answer = right_answer()
    answer["query"] = {"value": {"type": "float", "repr": "0.0", "digest": ""}}
    answer["root"]["value"]["repr"] = "0.0"
    assert score(answer, TRUTH, REC).wrong_root is None
    answer["root"]["value"]["repr"] = "(<cell>,)"  # a step inside a library, not the value
    s = score(answer, TRUTH, REC)
    assert s.wrong_root is not None and "(<cell>,)" in s.wrong_root
    assert s.precision == pytest.approx(6 / 7)
