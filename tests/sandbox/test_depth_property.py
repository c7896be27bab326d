"""The depth property's judge (sealtrace.sandbox._depth_property) on answers written by hand:
a prefix holds, a changed or re-expanded node breaks it, and the truncated flag is checked
both ways (a cut answer must say so, an uncut one must not); and the answers it compares are
the ones `trace` gives."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from sealtrace.proxy import Identity, write_keypair
from sealtrace.sandbox import Inquiry
from sealtrace.sandbox._depth_property import ProgramProperty, compare, cut, judge
from sealtrace.sandbox._program_runs import record_program
from sealtrace.sandbox.questions import Trace
from sealtrace.sandbox.validation.corpus import CORPUS


def node(counter: int, *inputs: dict[str, Any], origin: str | None = None) -> dict[str, Any]:
    return {
        "counter": counter,
        "file": "/p/app.py",
        "line": counter,
        "function": "main",
        "op": f"OP{counter}",
        "value": {"type": "int", "repr": str(counter), "digest": ""},
        "origin": None if origin is None else {"kind": origin, "call": None, "event": None},
        "inputs": list(inputs),
    }


def answer(root: dict[str, Any], truncated: bool) -> dict[str, Any]:
    return {"query": {"truncated": truncated}, "root": root}


# The full answer: 9 <- (7 <- 3 (constant), 8 <- 5 <- 1 (external))
def full() -> dict[str, Any]:
    return node(
        9, node(7, node(3, origin="constant")), node(8, node(5, node(1, origin="external")))
    )


def at_depth(tree: dict[str, Any], depth: int) -> dict[str, Any]:
    """`tree` cut as a correct engine would cut it at `depth`."""
    out = copy.deepcopy(tree)

    def prune(n: dict[str, Any], level: int) -> None:
        if level == depth:
            n["inputs"] = []
        for child in n["inputs"]:
            prune(child, level + 1)

    prune(out, 0)
    return out


def test_a_correct_engine_holds_at_every_depth() -> None:
    answers = {d: answer(at_depth(full(), d), truncated=d < 3) for d in (1, 2, 3, 4)}
    result = ProgramProperty(CORPUS[0])
    judge(answers, result)
    assert result.violations == []
    assert result.cut == {1: 2, 2: 1, 3: 0, 4: 0}


def test_a_deeper_answer_that_changes_a_node_breaks_the_prefix() -> None:
    shallow = at_depth(full(), 2)
    deep = full()
    deep["inputs"][1] = node(6, node(1, origin="external"))  # another producer at depth 1
    why = compare(shallow, deep)
    assert why is not None and "OP8" in why and "OP6" in why
    assert compare(at_depth(full(), 1), full()) is None
    assert compare(full(), full()) is None


def test_unknown_at_a_small_depth_that_turns_known_breaks_the_prefix() -> None:
    shallow = node(9, node(7, origin="unknown"), node(8))
    assert compare(shallow, full()) is not None


def test_an_expanded_node_must_keep_its_inputs() -> None:
    shallow = at_depth(full(), 2)
    deep = full()
    deep["inputs"][0]["inputs"] = []  # expanded at depth 2, not at depth 3
    assert compare(shallow, deep) is not None


def test_the_truncated_flag_is_checked_both_ways() -> None:
    cut_but_silent = {1: answer(at_depth(full(), 1), truncated=False)}
    whole_but_flagged = {4: answer(full(), truncated=True)}
    for answers, kind in (
        (cut_but_silent, "truncated-false"),
        (whole_but_flagged, "truncated-true"),
    ):
        result = ProgramProperty(CORPUS[0])
        judge(answers, result)
        assert result.kinds == [kind]
    honest = ProgramProperty(CORPUS[0])
    judge({1: answer(at_depth(full(), 1), True), 4: answer(full(), False)}, honest)
    assert honest.holds


def test_a_step_shown_again_is_not_cut() -> None:
    shared = node(5, node(1, origin="external"))
    again = node(5)  # expanded elsewhere, shown again without its inputs
    assert cut(node(9, shared, node(8, again))) == 0
    assert cut(node(9, node(8, node(4)))) == 1


def test_one_slice_pass_gives_the_answers_of_separate_traces(tmp_path: Path) -> None:
    """Inquiry.traces walks one recorded slice back to every depth; each answer must be the
    one `trace --depth N` gives on its own, or the property would test another engine."""
    program = next(p for p in CORPUS if p.name == "augmented_item")
    recipient, identity = write_keypair(tmp_path / "keys", "depth")
    run = record_program(
        program.program, program.script, program.make_inputs, tmp_path / "run", recipient,
        Identity.load(identity),
    )  # fmt: skip
    at = f"{run.script}:{program.trace_line(run.root)}"
    together = Inquiry(run.data, run.parsed).traces(Trace(at=at, var=program.trace), (1, 3, 64))
    for depth, answer in together.items():
        alone = Inquiry(run.data, run.parsed).trace(Trace(at=at, var=program.trace, depth=depth))
        assert answer["root"] == alone["root"], depth
        assert answer["query"]["truncated"] == alone["query"]["truncated"]
