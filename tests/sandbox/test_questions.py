"""The question contract (sealtrace.sandbox.questions): every kind, asked of both answerers.

The conformance test asks each kind's sample question of the in-process answerer (Inquiry)
and of the sandboxed one (SandboxClient, its runner a child process speaking fixed frames),
through the one dispatch everybody uses (`ask`), and checks that both answers have the
contract's shape and agree on everything the sandbox may show. A kind added to the contract
without a sample here fails `test_every_kind_has_a_sample`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sealtrace.agent._serving import answer as answer_relayed
from sealtrace.sandbox import QueryError
from sealtrace.sandbox.protocol import Op, question_of, request_for
from sealtrace.sandbox.questions import (
    KINDS,
    Flows,
    InspectStack,
    Question,
    Replay,
    Requests,
    Source,
    Trace,
    ask,
    check_answer,
    json_schema,
    parse_at,
    parse_question,
    question_json,
)

from ..conftest import KeyFiles
from .test_provenance_story import APP, _line, story

__all__ = ["story"]  # the recording these questions are asked of


def _samples(parsed: Any) -> dict[str, Question]:
    event = next(i for i, e in enumerate(parsed.events) if e.callee == "sqlite3.Cursor.fetchone")
    line = _line(APP / "services" / "pricing.py", "return round(total, 2)")
    return {
        "trace": Trace(at="routes/orders.py:4", var="order.total_price", depth=8),
        "flows": Flows(source=f"event:{event}"),
        "inspect-stack": InspectStack(at=f"services/pricing.py:{line}"),
        "replay": Replay(),
        "source": Source(file="services/pricing.py"),
        "requests": Requests(),
    }


@pytest.fixture(scope="module")
def answerers(story: tuple[Path, KeyFiles]) -> Iterator[tuple[Any, Any, Any]]:
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import Inquiry, load_recording

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    with Inquiry(data, parsed) as plain, SandboxClient(data, parsed) as boxed:
        yield plain, boxed, parsed


def test_every_kind_has_a_sample(answerers: tuple[Any, Any, Any]) -> None:
    assert set(_samples(answerers[2])) == set(KINDS)


def _projection(kind: str, doc: Any) -> Any:
    """What both answerers must agree on: everything but what only the in-process one may
    show (a value's text and digest, a library file's name, a function's name outside the
    recorded sources, how long a replay took, the number of tainted values)."""
    if kind == "trace":

        def node(n: Any) -> Any:
            return (n["counter"], n["line"], n["op"].split(" ")[0], [node(c) for c in n["inputs"]])

        q = doc["query"]
        return (q["at"], q["var"], q["depth"], q["stopped_at"]["counter"], node(doc["root"]))
    if kind == "flows":
        locations = [(p["counter"], p["line"], p["count"]) for p in doc["locations"]]
        return (doc["query"]["from"], locations, doc["outputs"])
    if kind == "inspect-stack":
        frames = [
            (f["line"], [(v["name"], v["tag"]) for v in f["locals"]])
            for f in doc["frames"]
            if f["file"].startswith(str(APP))
        ]
        return (doc["query"], frames)
    if kind == "replay":
        return {k: v for k, v in doc.items() if k != "seconds"}
    if kind in ("source", "requests"):
        return doc
    raise AssertionError(f"no projection for {kind}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_both_answerers_answer_every_kind_alike(kind: str, answerers: tuple[Any, Any, Any]) -> None:
    plain, boxed, parsed = answerers
    question = _samples(parsed)[kind]
    in_process = ask(plain, question)
    sandboxed = ask(boxed, question)
    assert check_answer(kind, in_process) == []
    assert check_answer(kind, sandboxed) == []
    assert _projection(kind, sandboxed) == _projection(kind, in_process)


def test_the_agent_answers_a_relayed_question_through_the_contract(
    answerers: tuple[Any, Any, Any],
) -> None:
    """The agent's serving loop hands the server's JSON to the contract and back: the same
    document as asking directly, and one clear error for a question the contract refuses."""
    from sealtrace.agent._serving import answer

    _plain, boxed, parsed = answerers
    question = _samples(parsed)["flows"]
    assert answer(boxed, question_json(question)) == {"document": ask(boxed, question)}
    refused = answer(boxed, {"kind": "trace", "depth": 1000})
    assert refused["status"] == 422 and "depth" in refused["error"]
    assert answer(boxed, {"kind": "explain"})["status"] == 422


def test_a_misshapen_answer_is_caught() -> None:
    """Negative control for check_answer: a missing key, an unknown key and a wrong type."""
    doc = {"query": {"at": "end", "counter": "7"}, "frames": [], "extra": 1}
    problems = check_answer("inspect-stack", doc)
    assert any("counter" in p for p in problems)
    assert any("extra" in p for p in problems)
    assert check_answer("inspect-stack", {"query": {"at": "end"}}) != []


# -- the JSON form and the frame mapping -----------------------------------------------------

SOURCES = ["/app/routes/orders.py", "/app/services/pricing.py"]
QUESTIONS = [
    Trace(at="routes/orders.py:4", var="order.total_price", depth=12),
    Trace(at="/app/services/pricing.py:9#3", var="x[0].y"),
    Trace(at="crash", var="total"),
    Trace(at="end", var="total", depth=1),
    Trace(at="123", var="total"),
    Flows(source="event:7"),
    Flows(source="order@routes/orders.py:4"),
    InspectStack(at="crash"),
    InspectStack(at="services/pricing.py:2"),
    Trace(at="return:main", var="total"),
    Trace(at="return:services/pricing.py:Order.total#2", var="self.items[0]"),
    InspectStack(at="return:outer.<locals>.inner#3"),
    Flows(source="order@return:routes/orders.py:handle"),
    Trace(at="output", var="order.total_price"),
    InspectStack(at="output"),
    Trace(at="request:3", var="b"),
    InspectStack(at="request:12"),
    Replay(),
    Source(file="routes/orders.py"),
    Requests(),
]
# The kinds the runner answers, each with a request frame; `source` and `requests` are
# answered by the agent from the recording it decrypted, and have none.
FRAMED = [q for q in QUESTIONS if not isinstance(q, (Source, Requests))]


@pytest.mark.parametrize("question", QUESTIONS, ids=repr)
def test_json_round_trip(question: Question) -> None:
    assert parse_question(question_json(question)) == question


def test_every_kind_is_in_the_round_trips_and_the_schema() -> None:
    assert {q.kind for q in QUESTIONS} == set(KINDS)
    schema = json_schema()
    kinds = {v["properties"]["kind"]["const"] for v in schema["question"]["oneOf"]}
    assert kinds == set(KINDS) == set(schema["answers"])


@pytest.mark.parametrize("question", FRAMED, ids=repr)
def test_a_request_frame_asks_what_the_question_asks(question: Question) -> None:
    """request_for (the agent) and question_of (the runner) are one mapping: the runner
    reads back the question the agent meant, with the file resolved to its recorded path."""
    frame, text = request_for(question, SOURCES)
    assert frame.op in {Op.TRACE, Op.FLOWS, Op.INSPECT, Op.REPLAY}
    back = question_of(frame, text.decode(), SOURCES)
    assert back.kind == question.kind
    assert request_for(back, SOURCES) == (frame, text)


@pytest.mark.parametrize(
    "doc",
    [
        {"kind": "nope"},
        {"kind": 3},
        {},
        {"kind": "trace", "depth": 0},
        {"kind": "trace", "depth": 65},
        {"kind": "trace", "depth": "6"},
        {"kind": "trace", "depth": True},
        {"kind": "trace", "var": 5},
        {"kind": "trace", "var": "x" * 4001},
        {"kind": "flows", "source": "event:1"},  # the JSON name is "from"
        {"kind": "replay", "at": "end"},
    ],
)
def test_bad_questions_are_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(QueryError):
        parse_question(doc)


def test_the_source_question_never_becomes_a_frame() -> None:
    with pytest.raises(QueryError, match="no request frame"):
        request_for(Source(file="routes/orders.py"), SOURCES)


def test_the_recorded_source_comes_from_the_recording(answerers: tuple[Any, Any, Any]) -> None:
    """Both answerers read the file from the recording, line by line, whatever is on disk;
    a library file or an unknown one is a clear refusal, and the session goes on."""
    plain, boxed, _parsed = answerers
    pricing = APP / "services" / "pricing.py"
    for answerer in (plain, boxed):
        doc = ask(answerer, Source(file="pricing.py"))
        assert doc == {"file": str(pricing), "lines": pricing.read_text().splitlines()}
        for missing in ("json/__init__.py", "/usr/lib/python3.11/json/__init__.py"):
            with pytest.raises(QueryError):
                ask(answerer, Source(file=missing))
    assert check_answer("replay", ask(boxed, Replay())) == []


def test_output_stops_where_the_last_output_was_written(
    answerers: tuple[Any, Any, Any],
) -> None:
    """`output` stops before the instruction whose call wrote the run's last output: the
    checkout job's print of the response, in main, its locals there; both answerers alike."""
    plain, boxed, _parsed = answerers
    printed = _line(APP / "app.py", "print(json.dumps(")
    stacks = [ask(a, InspectStack(at="output")) for a in (plain, boxed)]
    for stack in stacks:
        top = stack["frames"][0]
        assert (top["file"], top["line"], top["function"]) == (str(APP / "app.py"), printed, "main")
        assert {"order", "discount"} <= {local["name"] for local in top["locals"]}
    assert stacks[0]["query"] == stacks[1]["query"] and stacks[0]["query"]["counter"] > 0
    traced = ask(boxed, Trace(at="output", var="order.total_price"))
    assert traced["query"]["value"]["repr"] == "0.0"
    with pytest.raises(QueryError, match="did not crash"):
        ask(plain, InspectStack(at="crash"))


def test_a_question_for_a_file_not_recorded_never_becomes_a_frame() -> None:
    with pytest.raises(QueryError, match="not a recorded source"):
        request_for(Trace(at="elsewhere.py:3", var="x"), SOURCES)


def test_an_over_long_expression_is_a_bad_question_not_the_end_of_the_session(
    answerers: tuple[Any, Any, Any],
) -> None:
    """4,000 characters of 'é' are 8,000 bytes: more than a request frame's text. Relayed,
    the contract refuses it (422); asked directly, the frame mapping does. Either way the
    sandbox client goes on answering."""
    _plain, boxed, _parsed = answerers
    long = "é" * 4000
    refused = answer_relayed(boxed, {"kind": "trace", "at": "end", "var": long})
    assert refused["status"] == 422 and "bytes" in refused["error"]
    with pytest.raises(QueryError, match="bytes"):
        boxed.trace(Trace(at="end", var=long))
    assert check_answer("replay", ask(boxed, Replay())) == []  # the session lives on


def test_a_return_stop_carries_its_function_in_the_request_text() -> None:
    """Agent → runner may carry strings: the function's name comes first in the text, `d`
    characters long, and the expression after it; the file, when given, is a source index."""
    from sealtrace.sandbox.protocol import NO_SOURCE, Stop

    frame, text = request_for(Trace(at="return:main#2", var="total"), SOURCES)
    assert (frame.e, frame.c, frame.d, frame.ival) == (Stop.RETURN, NO_SOURCE, 4, 2)
    assert text == b"maintotal"
    frame, text = request_for(InspectStack(at="return:pricing.py:Order.total"), SOURCES)
    assert (frame.c, frame.d, text) == (1, len("Order.total"), b"Order.total")
    bad = dataclasses.replace(frame, d=99)  # a name longer than the text: a bad request
    with pytest.raises(QueryError):
        question_of(bad, text.decode(), SOURCES)


@pytest.mark.parametrize(
    ("at", "says"),
    [
        ("pricing.py:total", "write return:pricing.py:total"),
        ("return:", "expected return:FUNC"),
        ("return:3", "expected return:FUNC"),
        ("return:a..b", "expected return:FUNC"),
        ("return:main#0", "returns count from 1"),
        ("main", "return:FUNC[#N]"),
    ],
)
def test_a_return_stop_has_one_grammar(at: str, says: str) -> None:
    with pytest.raises(QueryError, match=re.escape(says)):
        parse_at(at)
