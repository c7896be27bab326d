"""A trace's locate and slice are one pass, and answer as the two passes did.

The pass that stops at AT keeps every instruction's input tags on its way there and walks
back from the value it finds (sealtrace.sandbox._inquiry.Inquiry.locate with slice depths),
so a trace is two replays (three for crash/output/end), not three (four). The oracle is the
old way, a locate and then a slice pass of its own that stops at the root: every answer here
must be the same node for node, and only the pass count differs. Where the edge limit cut the
locate's recording short, the inquiry asks the slice pass after all.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import line_of, record, walk, without_passes, write_app

pytestmark = pytest.mark.integration

# The recording's plaintext and parsed stream, the program's path, the store and its keys.
Recorded = tuple[bytes, Any, str, Path, KeyFiles]

PROGRAM = """\
import json
import sys

RATES = {"gold": 0.2, "silver": 0.1}


def squares(items):
    for item in items:
        yield item["qty"] * item["qty"]


def main():
    order = json.loads(sys.stdin.read())
    tier = order["tier"]
    # sum() drives the generator and sorted() calls its key: what they run comes after the
    # instruction that made the value, by counter, and is its ancestry all the same.
    weight = sum(squares(order["items"]))
    first = sorted(order["items"], key=lambda item: -item["price"])[0]
    total = round(weight * first["price"] * (1 - RATES[tier]), 2)
    churn = [str(n) * 3 for n in range(2000)]  # work after the value is made
    label = f"{tier}:{total}"
    print(label, len(churn))
    return total


RESULT = main()
"""

STDIN = b'{"tier": "gold", "items": [{"qty": 2, "price": 3.5}, {"qty": 3, "price": 1.25}]}'


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    from sealtrace.proxy import write_keypair
    from sealtrace.sandbox import load_recording

    tmp = tmp_path_factory.mktemp("passes")
    keys = KeyFiles(*write_keypair(tmp / "keys", "test"))
    app = write_app(tmp / "app", PROGRAM, "order.py")
    done = record(keys, tmp / "rec", [sys.executable, str(app)], stdin=STDIN)
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    data, parsed = load_recording(str(tmp / "rec"), keys.identity)
    return data, parsed, str(app), tmp / "rec", keys


def _answers(inquiry: Any, at: str, var: str, depths: Sequence[int]) -> tuple[dict[int, Any], int]:
    from sealtrace.sandbox.questions import Trace

    answers = inquiry.traces(Trace(at=at, var=var, depth=max(depths)), depths)
    return answers, inquiry.passes


def _questions(app: str) -> list[tuple[str, str]]:
    return [
        (f"{app}:{line_of(PROGRAM, 'print(label')}", "label"),
        (f"{app}:{line_of(PROGRAM, 'print(label')}", "total"),
        (f"{app}:{line_of(PROGRAM, 'churn = [')}", "weight"),
        ("end", "RESULT"),
    ]


def test_one_pass_locates_and_slices_with_the_answers_of_two(
    recorded: Recorded,
) -> None:
    from sealtrace.sandbox import Inquiry

    class TwoPasses(Inquiry):  # the oracle: locate, then a slice pass of its own
        def locate(self, at: Any, expr: str | None = None, slice_depths: Sequence[int] = ()):
            return super().locate(at, expr)

    data, parsed, app, *_ = recorded
    for at, var in _questions(app):
        for depths in ((64,), (1, 3, 64)):
            with Inquiry(data, parsed) as one, TwoPasses(data, parsed) as two:
                merged, merged_passes = _answers(one, at, var, depths)
                oracle, oracle_passes = _answers(two, at, var, depths)
            assert merged_passes == oracle_passes - 1, (at, var, merged_passes, oracle_passes)
            for depth in depths:
                assert without_passes(merged[depth]) == without_passes(oracle[depth]), (
                    at,
                    var,
                    depth,
                )
            inputs = merged[max(depths)]["root"]["inputs"]
            assert inputs, (at, var)  # something to compare: the value was made from others


def test_the_engine_s_own_loop_answers_as_the_trace_callback(recorded: Recorded) -> None:
    # Every pass runs the replayed frames in the engine's evaluation loop (and tags moves,
    # constants and plain operators itself where no question watches); the trace callback is
    # the reference it is held to: the same answers node for node, in one pass and in a
    # session slicing from its checkpoints' edges.
    from sealtrace.sandbox import CheckpointPolicy, Inquiry

    data, parsed, app, *_ = recorded
    with Inquiry(data, parsed) as loop, Inquiry(data, parsed, trace_callback=True) as ref:
        looped, called = loop.survey()["stats"], ref.survey()["stats"]
    assert looped["loop_frames"] > 0 and looped["loop_quick"] > 0
    assert called["loop_frames"] == called["loop_quick"] == 0
    assert looped["instructions"] == called["instructions"]
    for policy in (None, CheckpointPolicy(interval=20_000)):
        for at, var in _questions(app):
            with (
                Inquiry(data, parsed, checkpoints=policy) as loop,
                Inquiry(data, parsed, checkpoints=policy, trace_callback=True) as ref,
            ):
                answer, _ = _answers(loop, at, var, (64,))
                reference, _ = _answers(ref, at, var, (64,))
            assert without_passes(answer[64]) == without_passes(reference[64]), (policy, at, var)
            assert answer[64]["root"]["inputs"], (at, var)


def test_a_locate_the_edge_limit_cut_short_leaves_the_slice_to_a_pass_of_its_own(
    recorded: Recorded,
) -> None:
    from sealtrace.sandbox import Inquiry

    class Limited(Inquiry):
        def run(self, query: dict[str, Any], start: int = 0) -> dict[str, Any]:
            if query["kind"] == "locate":
                query = {**query, "edge_limit": 50}
            return super().run(query, start)

    data, parsed, app, *_ = recorded
    at, var = _questions(app)[0]
    with Inquiry(data, parsed) as one, Limited(data, parsed) as limited:
        merged, merged_passes = _answers(one, at, var, (64,))
        cut = limited.locate(_parse(at), var, (64,))
        assert "slice" not in cut and cut["value"]["tag"] > 0
        limited.passes = 0
        fallback, fallback_passes = _answers(limited, at, var, (64,))
    assert fallback_passes == merged_passes + 1
    assert without_passes(fallback[64]) == without_passes(merged[64])


def _parse(at: str) -> Any:
    from sealtrace.sandbox.questions import parse_at

    return parse_at(at)


def test_the_recorded_program_answers_as_it_ran(
    recorded: Recorded,
) -> None:
    """The value asked about is the one the program printed: the comparisons above are of
    real answers."""
    from sealtrace.sandbox import Inquiry

    data, parsed, app, *_ = recorded
    at, var = _questions(app)[0]
    with Inquiry(data, parsed) as inquiry:
        answers, _ = _answers(inquiry, at, var, (64,))
    total = round((2 * 2 + 3 * 3) * 3.5 * (1 - 0.2), 2)
    assert answers[64]["root"]["value"]["repr"] == repr(f"gold:{total}")
    assert Path(app).name in {Path(n["file"]).name for n in walk(answers[64]["root"])}


# -- in a session: the slice goes on from the checkpoint before the stop --------------------

POLICY_INTERVAL = 2_000  # instructions: the program above runs tens of thousands


def _session_questions(recorded: Recorded) -> list[tuple[str, str]]:
    """Questions stopping at a counter (the ones a session slices from a checkpoint): the
    run's end, and the counter where the program prints."""
    from sealtrace.sandbox import Inquiry

    data, parsed, app, *_ = recorded
    with Inquiry(data, parsed) as inquiry:
        located = inquiry.locate(_parse(_questions(app)[0][0]), "label")
    printing = str(located["counter"])
    return [("end", "RESULT"), (printing, "label"), (printing, "total"), (printing, "weight")]


def _serving(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, int, int]]:
    """Every question a session sends a checkpoint from now on: (kind, whether it slices
    from the checkpoint's edges, the counter it starts at, the checkpoint it is sent to)."""
    from sealtrace.sandbox._checkpoints import CheckpointedReplay

    served: list[tuple[str, bool, int, int]] = []
    ask = CheckpointedReplay.ask

    def asked(self: Any, query: dict[str, Any], start: int, edges: bool = False) -> Any:
        inherit = bool((query.get("slice") or {}).get("inherit"))
        served.append((query["kind"], inherit, start, self.nearest(start, edges)))
        return ask(self, query, start, edges)

    monkeypatch.setattr(CheckpointedReplay, "ask", asked)
    return served


def _limited_serve(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """The serve pass of every session from now on stops recording edges past `limit`."""
    import sealtrace.sandbox._inquiry as inquiry_module

    real_replay = inquiry_module.replay

    def limited(data: Any, meta: Any, **kwargs: Any) -> Any:
        if kwargs.get("query", {}).get("kind") == "serve":
            kwargs["query"] = {**kwargs["query"], "edge_limit": limit}
        return real_replay(data, meta, **kwargs)

    monkeypatch.setattr(inquiry_module, "replay", limited)


def test_a_session_slices_from_the_checkpoint_before_the_stop_with_the_same_answers(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._checkpoints import CheckpointPolicy

    class TwoPasses(Inquiry):
        def locate(self, at: Any, expr: str | None = None, slice_depths: Sequence[int] = ()):
            return super().locate(at, expr)

    served = _serving(monkeypatch)  # (kind, inherit, start, checkpoint)
    data, parsed, *_ = recorded
    policy = CheckpointPolicy(interval=POLICY_INTERVAL, budget=0.0)
    with Inquiry(data, parsed, checkpoints=policy) as session, TwoPasses(data, parsed) as oracle:
        for at, var in _session_questions(recorded):
            served.clear()
            mine, _ = _answers(session, at, var, (64,))
            theirs, _ = _answers(oracle, at, var, (64,))
            assert without_passes(mine[64]) == without_passes(theirs[64]), (at, var)
            locates = [s for s in served if s[0] == "locate"]
            assert len(locates) == 1 and locates[0][1], served  # sliced on the way
            _kind, _inherit, start, checkpoint = locates[0]
            first = session._checkpointed().first
            assert first is not None and first < checkpoint <= start, served
            assert start - checkpoint < 2 * POLICY_INTERVAL, served  # not from the start
            assert not [s for s in served if s[0] == "slice"], served
            captures = [s for s in served if s[0] == "capture"]
            assert captures and all(s[2] - s[3] < 2 * POLICY_INTERVAL for s in captures), served


def test_a_session_whose_serve_pass_stopped_recording_edges_slices_from_before_that(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serve pass's edges overflowed (a limit of 50 here): its later checkpoints say they
    hold none, and a question slices in its locate from the latest one that still holds them
    (the first), for the same answer; had the session sent it to the nearest one, whose
    edges stop short, its worker would have sliced nothing (a slice pass of its own)."""
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._checkpoints import CheckpointPolicy

    data, parsed, *_ = recorded
    at, var = _session_questions(recorded)[1]
    policy = CheckpointPolicy(interval=POLICY_INTERVAL, budget=0.0)
    with Inquiry(data, parsed, checkpoints=policy) as session:
        session.survey()
        before = session.passes
        whole, _ = _answers(session, at, var, (64,))
        passes = session.passes - before
    _limited_serve(monkeypatch, 50)
    served = _serving(monkeypatch)
    with Inquiry(data, parsed, checkpoints=policy) as cut:
        cut.survey()
        server = cut._checkpointed()
        edged, taken = set(server.edged), sorted(server.checkpoints)
        assert server.first in edged and len(edged) < len(taken)
        before = cut.passes
        fallback, _ = _answers(cut, at, var, (64,))
        fallback_passes = cut.passes - before
    assert fallback_passes == passes
    assert without_passes(fallback[64]) == without_passes(whole[64])
    [(_kind, inherit, start, checkpoint)] = [s for s in served if s[0] == "locate"]
    nearest = max(c for c in taken if c <= start)
    assert inherit and checkpoint in edged and checkpoint < nearest, served
    assert not [s for s in served if s[0] == "slice"], served


def test_in_process_a_stop_the_run_is_surveyed_for_takes_checkpoints_by_default(
    recorded: Recorded,
) -> None:
    """`trace --at end --in-process` keeps checkpoints (and their edges) on its first pass,
    as a session does, for the same answer as with none; a FILE:LINE stop takes none unless
    asked, and `--checkpoint-every 0` turns them off."""
    from sealtrace.sandbox.cli import AUTO_CHECKPOINT_EVERY, _answerer

    _data, _parsed, app, store, keys = recorded
    documents = []
    for extra in ((), ("--checkpoint-every", "0")):
        proc = run_cli(
            "trace", str(store), "--identity", str(keys.identity_path), "--in-process",
            "--at", "end", "--var", "RESULT", "--json", *extra,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        documents.append(json.loads(proc.stdout))
    assert documents[0]["root"] == documents[1]["root"] and documents[0]["root"]["inputs"]

    def policy(every: int | None, at: str) -> Any:
        answerer, _lines = _answerer(str(store), keys.identity_path, None, every, 64, False, at)
        with answerer:
            return answerer.policy

    assert policy(None, "end").interval == AUTO_CHECKPOINT_EVERY
    assert policy(None, "crash") is not None and policy(None, "output") is not None
    assert policy(None, f"{app}:3") is None
    assert policy(0, "end") is None
    assert policy(5000, f"{app}:3").interval == 5000


def _located_as_alone(
    recorded: Recorded,
    session: Any,
    served: list[tuple[str, bool, int, int]],
    at: str,
    var: str,
) -> tuple[int, int, int]:
    """A question in the session, answered as by an inquiry with no checkpoints, located and
    sliced in one pass from a checkpoint's edges (no slice pass): where that pass started,
    the checkpoint it was sent to, and the counter it stopped at."""
    from sealtrace.sandbox import Inquiry

    served.clear()
    mine, _ = _answers(session, at, var, (64,))
    data, parsed, *_ = recorded
    with Inquiry(data, parsed) as alone:
        theirs, _ = _answers(alone, at, var, (64,))
    assert without_passes(mine[64]) == without_passes(theirs[64]), var
    assert not [s for s in served if s[0] == "slice"], served
    [(_kind, inherit, start, checkpoint)] = [s for s in served if s[0] == "locate"]
    assert inherit, served
    return start, checkpoint, mine[64]["query"]["stopped_at"]["counter"]


def test_a_further_question_at_a_stop_goes_on_from_the_checkpoint_its_first_kept_there(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serve pass's edges overflowed at once (a limit of 50: an accumulator's whole-run
    ancestry does so at scale): the first question at a counter slices in its locate from the
    latest checkpoint still holding its edges (the first), and keeps one at its stop with the
    edges it recorded; the next questions there start from it, replaying nothing, with no
    slice pass of their own. Each answers as an inquiry with no checkpoints."""
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._checkpoints import KEEP_GAP, CheckpointPolicy

    questions = _session_questions(recorded)[1:]  # where the program prints
    stop = int(questions[0][0])
    _limited_serve(monkeypatch, 50)
    served = _serving(monkeypatch)
    data, parsed, *_ = recorded
    with Inquiry(
        data, parsed, checkpoints=CheckpointPolicy(interval=POLICY_INTERVAL, budget=0.0)
    ) as session:
        session.survey()
        server = session._checkpointed()
        first = server.first
        assert first is not None and stop - first >= KEEP_GAP
        assert first in server.edged and stop not in server.edged
        for n, (at, var) in enumerate(questions):
            start, checkpoint, _ = _located_as_alone(recorded, session, served, at, var)
            assert start == stop, served
            if n == 0:
                assert checkpoint < stop and checkpoint in server.edged, served
                assert stop in server.kept and stop in server.edged
            else:
                assert checkpoint == stop, served  # kept by the first question


def test_a_line_stop_located_once_is_asked_again_at_its_counter(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FILE:LINE stop's hits count from the start: its first question replays from the
    first checkpoint (slicing on the way) and keeps one at the stop; the session remembers
    the counter it stopped at, so the next question there is a counter stop served by that
    checkpoint. Each answers as an inquiry with no checkpoints."""
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._checkpoints import CheckpointPolicy

    served = _serving(monkeypatch)
    data, parsed, app, *_ = recorded
    at = _questions(app)[0][0]
    with Inquiry(
        data, parsed, checkpoints=CheckpointPolicy(interval=POLICY_INTERVAL, budget=0.0)
    ) as session:
        session.survey()
        server = session._checkpointed()
        starts = []
        for var in ("label", "total", "weight"):
            start, checkpoint, stopped = _located_as_alone(recorded, session, served, at, var)
            starts.append((start, checkpoint))
        assert starts[0] == (0, server.first)  # from the start: the first checkpoint
        assert starts[1] == starts[2] == (stopped, stopped)  # at the checkpoint kept there
        assert stopped in server.kept and stopped in server.edged


ACCUMULATOR = """\
prices = [round(1 + (i * 37 % 101) / 10, 2) for i in range(100)]
total = 0
for i in range(20000):
    total += prices[i % 100] * (i % 3)
answer = round(total / 20000, 4)
"""


def test_a_session_keeps_only_the_edges_a_slice_within_the_depth_bound_reads(
    tmp_path: Path, keys: KeyFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An accumulator's ancestry is the whole run: a serve pass keeping every edge a live
    value leads back to passes a limit of 20,000 input tags early, and its later checkpoints
    hold no edges. Told the inquiry's depth bound (every pass is), it keeps the last 64
    levels' worth: every checkpoint holds its edges, and the answer is the one of an inquiry
    with no checkpoints."""
    from sealtrace.sandbox import Inquiry, load_recording
    from sealtrace.sandbox._checkpoints import CheckpointPolicy

    app = write_app(tmp_path / "app", ACCUMULATOR, "accumulate.py")
    done = record(keys, tmp_path / "rec", [sys.executable, str(app)])
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    data, parsed = load_recording(str(tmp_path / "rec"), keys.identity)
    with Inquiry(data, parsed) as alone:
        expected, _ = _answers(alone, "end", "answer", (64,))
    _limited_serve(monkeypatch, 20_000)
    policy = CheckpointPolicy(interval=20_000, budget=0.0)
    with Inquiry(data, parsed, checkpoints=policy) as session:
        session.survey()
        server = session._checkpointed()
        assert len(server.checkpoints) > 5 and set(server.edged) == set(server.checkpoints)
        answer, _ = _answers(session, "end", "answer", (64,))
    assert without_passes(answer[64]) == without_passes(expected[64])
    # The negative control: the same session told no bound.
    unbounded = Inquiry._settings
    monkeypatch.setattr(Inquiry, "_settings", lambda self: {**unbounded(self), "depth_bound": 0})
    with Inquiry(data, parsed, checkpoints=policy) as session:
        session.survey()
        server = session._checkpointed()
        assert len(set(server.edged)) < len(server.checkpoints)


def test_a_slice_deeper_than_the_bound_is_refused(recorded: Recorded) -> None:
    """Every pass keeps only the edges a slice MAX_DEPTH deep reads; a deeper one, asked
    through the API where no command line checks it, would take the first dropped step for
    an origin. It is refused before any pass, not answered."""
    from sealtrace.sandbox import Inquiry, QueryError
    from sealtrace.sandbox.questions import MAX_DEPTH, Trace

    data, parsed, *_ = recorded
    with Inquiry(data, parsed) as inquiry:
        with pytest.raises(QueryError, match=f"at most {MAX_DEPTH}"):
            inquiry.trace(Trace(at="end", var="RESULT", depth=MAX_DEPTH + 1))
        assert inquiry.passes == 0
        answer = inquiry.trace(Trace(at="end", var="RESULT", depth=MAX_DEPTH))
    assert answer["root"]["inputs"]


def test_a_capture_that_numbered_the_run_otherwise_than_the_slice_is_refused(
    recorded: Recorded,
) -> None:
    """A trace's capture and its slice are different passes, joined by counter. Where they
    numbered the run differently (a checkpoint whose program had collected its garbage at
    another instant did), the tree built from the capture would follow other steps than the
    slice found, and look complete: the inquiry checks each captured step's inputs against the
    slice and refuses. Here the capture is made to describe the step a few after each."""
    from sealtrace.sandbox import DivergenceError, Inquiry
    from sealtrace.sandbox.questions import Trace

    class OneOff(Inquiry):
        def capture(self, counters: set[int]) -> dict[int, dict[str, Any]]:
            shifted = super().capture({c + 5 for c in counters})
            return {c - 5: node for c, node in shifted.items()}

    data, parsed, app, *_ = recorded
    question = Trace(at=f"{app}:{line_of(PROGRAM, 'print(label')}", var="total")
    with Inquiry(data, parsed) as right:
        assert right.trace(question)["root"]["inputs"]  # the control: the same question answers
    with OneOff(data, parsed) as wrong, pytest.raises(DivergenceError, match="differently"):
        wrong.trace(question)


def test_the_passes_agree_where_each_captured_step_names_the_inputs_the_slice_read() -> None:
    from sealtrace.sandbox import DivergenceError
    from sealtrace.sandbox._inquiry import _check_passes_agree

    def step(edges: list[int] | None) -> dict[str, Any]:
        return {"edges": edges, "file": "f.py", "line": 1, "op": "op"}

    captured = {10: step([8, 9]), 9: step([5]), 8: step([]), 5: step(None)}
    # A step the slice kept no inputs for is not compared (its edges were never recorded),
    # nor is one the capture did not describe.
    _check_passes_agree({10: [8, 9], 9: [5], 8: [], 7: [3]}, captured)
    with pytest.raises(DivergenceError, match=r"step 9 is op at f\.py:1"):
        _check_passes_agree({10: [8, 9], 9: [4]}, captured)
    with pytest.raises(DivergenceError, match="reading nothing"):
        _check_passes_agree({8: [2]}, captured)


FLOWING = """\
prices = {}
prices["total"] = round(3 * 1.5, 2)
label = f"total {prices['total']}"
print(label)
"""


@pytest.mark.parametrize("spelt", ["prices['total']", 'prices["total"]', "prices[ 'total' ]"])
def test_a_flow_from_a_tag_another_pass_numbered_otherwise_is_refused(
    tmp_path: Path, keys: KeyFiles, spelt: str
) -> None:
    """A flow from a located value follows its producer's tag through a pass of its own,
    which finds the value where it was located again and checks it still carries that tag:
    a pass that numbered the run otherwise would follow another value and answer with its
    uses. Here the locate is made to report a tag three steps off. However the expression is
    spelt, the value is followed by its own tag (and so checked)."""
    from sealtrace.sandbox import DivergenceError, Inquiry, load_recording
    from sealtrace.sandbox.questions import Flows

    app = write_app(tmp_path / "app", FLOWING)
    done = record(keys, tmp_path / "rec", [sys.executable, str(app)])
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    data, parsed = load_recording(str(tmp_path / "rec"), keys.identity)
    question = Flows(source=f"{spelt}@{app}:{line_of(FLOWING, 'label = ')}")

    class Off(Inquiry):
        def locate(self, at: Any, expr: str | None = None, slice_depths: Sequence[int] = ()):
            located = super().locate(at, expr, slice_depths)
            located["value"]["tag"] = int(located["value"]["tag"]) - 3
            return located

    with Inquiry(data, parsed) as right:
        flows = right.flows(question)  # the control: followed from its own tag, it answers
    assert {o["call"] for o in flows["outputs"]} == {"stdout.write"}, flows
    with Off(data, parsed) as wrong, pytest.raises(DivergenceError, match="differently"):
        wrong.flows(question)


class _Glitching:
    """An Inquiry whose capture describes the step a few after each (as a pass that numbered
    the run otherwise would) in its first `glitches` captures, noting for each whether the
    question's passes started from checkpoints."""

    @staticmethod
    def make(glitches: int, checkpoints: Any) -> Any:
        from sealtrace.sandbox import Inquiry

        class Glitching(Inquiry):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.from_checkpoints: list[bool] = []

            def capture(self, counters: set[int]) -> dict[int, dict[str, Any]]:
                self.from_checkpoints.append(self._server() is not None)
                if len(self.from_checkpoints) > glitches:
                    return super().capture(counters)
                shifted = super().capture({c + 5 for c in counters})
                return {c - 5: node for c, node in shifted.items()}

        return lambda data, parsed: Glitching(data, parsed, checkpoints=checkpoints)


def test_a_question_whose_passes_from_checkpoints_disagree_is_asked_again_from_the_start(
    recorded: Recorded,
) -> None:
    """Passes forked from checkpoints that number the run differently are not answered from;
    the question is asked again with every pass from the start, and answered only if those
    agree: the same answer as a session that asked nothing of its checkpoints."""
    from sealtrace.sandbox import DivergenceError, Inquiry
    from sealtrace.sandbox._checkpoints import CheckpointPolicy
    from sealtrace.sandbox.questions import Trace

    data, parsed, app, *_ = recorded
    question = Trace(at=f"{app}:{line_of(PROGRAM, 'print(label')}", var="total")
    policy = CheckpointPolicy(interval=POLICY_INTERVAL, budget=0.0)
    with Inquiry(data, parsed) as plain:
        expected = plain.trace(question)
    with _Glitching.make(1, policy)(data, parsed) as once:
        answer = once.trace(question)
        assert answer["root"] == expected["root"]
        assert {**answer["query"], "passes": 0} == {**expected["query"], "passes": 0}
        assert once.from_checkpoints == [True, False]
        # The next question uses the checkpoints again.
        assert once.trace(question)["root"] == expected["root"]
        assert once.from_checkpoints == [True, False, True]
    # Negative controls: passes from the start that disagree too are refused, and so is a
    # session without checkpoints, whose passes started from the start already.
    with _Glitching.make(2, policy)(data, parsed) as twice, pytest.raises(DivergenceError):
        twice.trace(question)
    with _Glitching.make(1, None)(data, parsed) as plain_once, pytest.raises(DivergenceError):
        plain_once.trace(question)
    assert plain_once.from_checkpoints == [False]


def test_a_capture_larger_than_a_pipe_holds_comes_back(recorded: Recorded) -> None:
    # The pass's query and the recording go to the replaying process through pipes of their
    # own, which it reads one after the other: a query larger than a pipe holds (64 KiB)
    # once waited for the child while the child waited for the recording behind it, for
    # ever (no timeout in-process). Every step of this run is well over that.
    from sealtrace.sandbox import Inquiry

    data, parsed, *_ = recorded
    with Inquiry(data, parsed, timeout=120) as inquiry:
        total = inquiry.survey()["instructions"]
        every = set(range(1, total + 1))
        assert len(json.dumps({"counters": sorted(every)})) > 1 << 16
        nodes = inquiry.capture(every)
    assert set(nodes) == every
