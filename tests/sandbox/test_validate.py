"""`sealtrace validate`: the planted root causes pass through the real CLI; the ground-truth
corpus is measured against a committed baseline (a ratchet: no idiom's precision or recall
may fall), and so is the depth property (a committed list of the programs known to break
it); and the validator itself can fail (a wrong ground truth, a decoy planted into the
truth, and a control that reaches an input all exit 3)."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import typer
from typer.testing import CliRunner

from sealtrace.sandbox import _validate
from sealtrace.sandbox.cli import register
from sealtrace.sandbox.questions import Trace
from sealtrace.sandbox.validation.cases import CASES, PLANTED, PROGRAMS, TRACE, Origin, marked_line
from sealtrace.sandbox.validation.corpus import CORPUS, DEPTH, IDIOMS
from sealtrace.sandbox.validation.truth import INPUT_KINDS, Truth, external, line, markers, resolve

from ..conftest import run_cli

if TYPE_CHECKING:
    from sealtrace.agent._sandbox_client import Transport
    from sealtrace.proxy._stream import ParsedStream

KINDS = {"constant", "external", "env", "argv"}
HERE = Path(__file__).resolve().parent
BASELINE = HERE / "validate_baseline.json"
DEPTH_KNOWN = HERE / "depth_property_known.json"
CORPUS_TIMEOUT = 1800.0

# Issue 22, item 7: every idiom the corpus must cover.
REQUIRED_IDIOMS = {
    "sum", "min-max", "sorted", "join", "any-all", "fsum", "statistics", "conversion",
    "json-dumps", "format", "augmented-item", "augmented-attr", "missing", "setdefault",
    "defaultdict", "counter", "deque", "ordereddict", "dataclass", "instance-dict", "slots",
    "descriptor", "copy", "buffered-io", "csv", "socket", "asyncio-stream", "sqlite-row",
    "decoder", "orm", "web", "asyncio", "csv-pipeline", "json-pipeline", "logging",
    "comprehension", "generator", "closure", "class", "exception", "control",
}  # fmt: skip


def test_manifest_names_every_answer() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    planted = [case for case in CASES if not case.is_control]
    assert len(planted) >= 8
    assert [case.name for case in CASES if case.is_control] == ["negative_control"]
    assert {case.truth.kind for case in planted if case.truth} == KINDS
    for case in CASES:
        assert (case.program / case.script).is_file(), case.name
        assert marked_line(case.program / case.script, TRACE) > 0
        files = sorted(p.name for p in case.program.glob("*.py"))
        marked = [f for f in files if PLANTED in (case.program / f).read_text()]
        if case.truth is None or case.truth.kind == "argv":
            assert marked == [], case.name
        else:
            assert marked == [case.truth.file], case.name
            assert case.truth_where().startswith(f"{case.truth.file}:")


def test_corpus_manifest_names_every_origin() -> None:
    """At least 40 programs covering every idiom; each marker of a program is named by its
    truth and each mark of the truth by a marker; controls name only constants."""
    names = [p.name for p in CORPUS]
    assert len(names) >= 40
    assert len(names) == len(set(names))
    assert not set(names) & {case.name for case in CASES}
    used = {idiom for p in CORPUS for idiom in p.idioms}
    assert used == set(IDIOMS)
    assert used >= REQUIRED_IDIOMS
    assert DEPTH == 64
    directories = sorted(
        d.name for d in PROGRAMS.iterdir() if d.is_dir() and d.name != "__pycache__"
    )
    assert directories == sorted([*names, *(c.directory or c.name for c in CASES)])
    for p in CORPUS:
        assert p.trace_line() > 0, p.name
        assert p.truth.origins, p.name
        marks = p.truth.roles()
        for role, mark in marks:
            resolve(mark, role, p.program)  # raises when the marker is missing or misused
        for path in sorted(p.program.glob("*.py")):
            flow = p.flows
            forward = [] if flow is None else [*flow.reaches, *flow.avoids]
            named = {m.name for _, m in marks if m.file == path.name and m.name}
            named |= {m.name for m in forward if m.file == path.name}
            assert set(markers(path)) == named, (p.name, path.name)
        if p.control:
            assert {m.kind for m in p.truth.origins} == {"constant"}, p.name
            assert all(m.kind not in INPUT_KINDS for m in p.truth.allowed), p.name
    assert [p.name for p in CORPUS if p.control] == ["control_layout", "control_policy"]


def _spans(path: Path) -> list[tuple[int, int]]:
    """Each statement's first and last line (a compound statement's: its header's)."""
    spans = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            last = body[0].lineno - 1 if isinstance(body, list) and body else node.end_lineno
            spans.append((node.lineno, last or node.lineno))
    return spans


def test_corpus_markers_are_on_one_line_statements() -> None:
    """A marked statement must fit on its line: where a call spans lines, which of them an
    event or a step is attributed to is not the program's author's to choose (and a
    formatter that wraps a long line would move the marker away from the call)."""
    wrapped = []
    for p in CORPUS:
        for path in sorted(p.program.glob("*.py")):
            lines = [n for _, n in markers(path).values()] + [p.trace_line()]
            spans = _spans(path)
            for n in lines:
                inner = min((s for s in spans if s[0] <= n <= s[1]), key=lambda s: s[1] - s[0])
                if inner[0] != inner[1]:
                    wrapped.append(f"{p.name}/{path.name}:{n}")
    assert wrapped == []


def _baseline(report: dict[str, Any]) -> dict[str, Any]:
    """The ratchet's view of a report: every idiom's and the overall figures, and the
    programs that did not get an answer."""

    def figures(f: dict[str, Any]) -> dict[str, Any]:
        return {"precision": f["precision"], "recall": f["recall"]}

    return {
        "depth": report["depth"],
        "overall": figures(report["corpus"]),
        "flows": figures(report["flows"]),
        "idioms": {name: figures(f) for name, f in report["idioms"].items()},
        "errors": sorted(
            c["name"] for c in report["cases"] if c["suite"] == "corpus" and c["error"]
        ),
    }


def _worse(now: float | None, then: float | None) -> bool:
    return then is not None and (now is None or now < then - 1e-9)


# Alone: under the rest of the suite's load, a web and an ORM case of the corpus were refused
# once (their passes disagreed), as the served request was (docs/provenance.md, "Found: the
# passes that ran a finalizer twelve steps apart"; closed, and kept by itself until parallel
# runs show it). A refusal keeps that from being a wrong answer but lowers the recall this
# ratchet holds; by itself, the figures are the engine's.
@pytest.mark.slow
@pytest.mark.alone
def test_corpus_figures_do_not_fall_below_the_baseline() -> None:
    """The ratchet: the engine does not meet recall 0.95 and precision 1.00 yet, so each
    idiom's figures, the overall ones and the flows' may only rise from those committed in
    validate_baseline.json (update it from `sealtrace validate --suite corpus --json` when
    they do: docs/validation.md). No program may fail that did not, and the negative
    controls must hold."""
    proc = run_cli("validate", "--suite", "corpus", "--json", "--jobs", "2", timeout=CORPUS_TIMEOUT)
    report = json.loads(proc.stdout)
    now, then = _baseline(report), json.loads(BASELINE.read_text())
    assert now["depth"] == then["depth"]
    assert set(now["idioms"]) == set(then["idioms"])
    before = {**then["idioms"], "overall": then["overall"], "flows": then["flows"]}
    fallen = {
        name: (before[name], figures)
        for name, figures in {
            **now["idioms"],
            "overall": now["overall"],
            "flows": now["flows"],
        }.items()
        if any(_worse(figures[k], before[name][k]) for k in ("precision", "recall"))
    }
    assert fallen == {}
    assert set(now["errors"]) <= set(then["errors"])
    assert report["negative_control"]["passed"] is True
    assert report["negative_control"]["cases"] == ["control_layout", "control_policy"]
    target_met = report["precision"] == 1.0 and report["recall"] >= _validate.RECALL_TARGET
    assert proc.returncode == (0 if target_met else 3), proc.stderr.decode()


@pytest.mark.slow
def test_depth_property_violations_are_the_known_ones() -> None:
    """The ratchet for the depth property: the programs whose answers break it today, and
    how, are listed in depth_property_known.json. A new violation fails, and so does a
    listed one that no longer happens (remove it from the list)."""
    proc = run_cli("validate", "--depth-property", "--json", "--jobs", "2", timeout=CORPUS_TIMEOUT)
    report = json.loads(proc.stdout)
    known = json.loads(DEPTH_KNOWN.read_text())
    assert report["depths"] == known["depths"]
    now = {case["name"]: case["kinds"] for case in report["cases"] if case["kinds"]}
    errors = sorted(case["name"] for case in report["cases"] if case["error"])
    assert errors == known["errors"]
    assert now == known["violations"]
    assert proc.returncode == (0 if report["ok"] else 3)


@pytest.mark.slow
def test_suite_passes_through_the_cli() -> None:
    proc = run_cli("validate", "--suite", "ranking", "--json")
    report = json.loads(proc.stdout)
    failing = {
        case["name"]: (case["truth"], case["top1"] and case["top1"]["where"], case["error"])
        for case in report["cases"]
        if not case["passed"]
    }
    assert failing == {}
    assert report["top1_precision"] == 1.0
    assert report["planted_cases"] == len(CASES) - 1
    assert report["negative_control"] == {"passed": True, "cases": ["negative_control"]}
    control = next(case for case in report["cases"] if case["control"])
    assert control["complete"]
    assert set(control["origin_kinds"]) <= {"constant"}
    assert proc.returncode == 0, proc.stderr.decode()


def test_the_validator_fails_on_a_wrong_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative controls for the validator: the same recording judged against a decoy (the
    north row, read by the same line as the poisoned south row) must fail, and so must a
    "control" whose value does depend on an input. Nothing is left in the temp directory."""
    base = next(case for case in CASES if case.name == "poisoned_input")
    wrong_truth = dataclasses.replace(
        base, name="wrong_truth", directory=base.name, truth=Origin("external", value="'north'")
    )
    false_control = dataclasses.replace(base, name="false_control", directory=base.name, truth=None)
    monkeypatch.setattr(_validate, "CASES", (wrong_truth, false_control))
    monkeypatch.setattr(_validate, "CORPUS", ())
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["validate", "--json"])

    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["top1_precision"] == 0.0
    assert report["negative_control"]["passed"] is False
    wrong, control = report["cases"]
    assert wrong["passed"] is False
    assert wrong["top1"]["where"] == wrong["truth"].split(" ", 1)[1]  # the same line...
    assert "'south'" in wrong["top1"]["value"]  # ...but the poisoned row, not the decoy
    assert wrong["truth_rank"] is None
    assert control["passed"] is False
    assert "external" in control["origin_kinds"]
    assert result.stderr.strip().splitlines() == [
        "sealtrace: error: validation failed: top-1 precision 0.00 (0/1); negative control "
        "FAILED; failing: wrong_truth, false_control"
    ]
    assert list(scratch.iterdir()) == []  # no plaintext recording, no private key


def test_the_corpus_scoring_fails_on_a_wrong_truth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative controls for the corpus's measurement, on programs the engine answers
    exactly today. A truth with the origin and the decoy swapped (south's rows for north's)
    scores no recall and a false positive; a truth with a decoy planted into its origins
    (globex's rows claimed for acme) loses recall; and a program that reads inputs into its
    value, run as a control, does not hold. Nothing is left in the temp directory."""
    base = {p.name: p for p in CORPUS}
    swapped = dataclasses.replace(
        base["augmented_item"],
        truth=Truth(
            origins=(external("sales", "'south'", call="fetchone"),),
            decoys=(line("south", "'north'"),),
        ),
    )
    truth = base["missing_tally"].truth
    planted = dataclasses.replace(
        base["missing_tally"],
        truth=dataclasses.replace(
            truth, origins=(*truth.origins, external("transfers", "'globex'", call="fetchone"))
        ),
    )
    false_control = dataclasses.replace(base["augmented_attr"], control=True)
    monkeypatch.setattr(_validate, "CASES", ())
    monkeypatch.setattr(_validate, "CORPUS", (swapped, planted, false_control))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["validate", "--json"])

    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)
    cases = {case["name"]: case for case in report["cases"]}
    assert report["ok"] is False
    wrong = cases["augmented_item"]
    assert wrong["error"] is None
    assert wrong["recall"] == 0.0
    assert {n["verdict"] for n in wrong["named"] if n["kind"] == "external"} >= {"decoy"}
    assert wrong["precision"] < 1.0
    more = cases["missing_tally"]
    assert more["error"] is None
    claimed = [e["named"] for e in more["expected"] if e["value"] == "'globex'"]
    assert claimed and not any(claimed)  # the decoy's rows are not in the answer
    assert 0.0 < more["recall"] < 1.0
    assert cases["augmented_attr"]["control_holds"] is False
    assert report["negative_control"] == {"passed": False, "cases": ["augmented_attr"]}
    assert report["precision"] < 1.0 and report["recall"] < 1.0
    assert list(scratch.iterdir()) == []  # no plaintext recording, no private key


def _agree(plain: dict[str, object], boxed: dict[str, object]) -> None:
    """A sandboxed node agrees with the in-process one; only strings the agent could not
    match (library files, unresolved reprs and operations) may be missing."""
    for key in ("counter", "line", "origin"):
        assert boxed[key] == plain[key], (key, plain, boxed)
    if boxed["file"]:
        assert (boxed["file"], boxed["function"]) == (plain["file"], plain["function"])
    if "?" not in str(boxed["op"]):
        assert boxed["op"] == plain["op"]
    repr_ = boxed["value"]["repr"]  # type: ignore[index]
    if repr_ is not None:
        assert repr_ == plain["value"]["repr"]  # type: ignore[index]
    inputs_b, inputs_p = boxed["inputs"], plain["inputs"]
    assert len(inputs_b) == len(inputs_p)  # type: ignore[arg-type]
    for b, p in zip(inputs_b, inputs_p, strict=True):  # type: ignore[call-overload]
        _agree(p, b)


@dataclasses.dataclass(frozen=True)
class Traced:
    """One validation case recorded, with its in-process trace."""

    name: str
    data: bytes
    parsed: ParsedStream
    where: str
    expr: str
    depth: int
    plain: dict[str, Any]


@pytest.fixture(scope="module")
def traced_cases() -> Iterator[list[Traced]]:
    """Every case recorded with the real CLI and traced in process, once for this module."""
    from sealtrace.proxy import Identity, write_keypair
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._replay_process import load_recording

    with tempfile.TemporaryDirectory(prefix="sealtrace-validate-agree-") as tmp:
        work = Path(tmp)
        recipient, identity = write_keypair(work / "keys", "agree")
        traced = []
        for case in CASES:
            program = work / case.name / "program"
            inputs_dir = work / case.name / "inputs"
            shutil.copytree(case.program, program)
            inputs_dir.mkdir()
            inputs = case.make_inputs(inputs_dir)
            store = work / case.name / "recording"
            proc = subprocess.run(
                [*_validate._sealtrace(), "record", "--recipient", str(recipient), "--output",
                 str(store), "--app-root", str(program), "--", sys.executable,
                 str(program / case.script), *inputs.args],
                cwd=inputs_dir, env={**os.environ, **inputs.env}, capture_output=True,
                timeout=120, check=False,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr.decode()
            shutil.rmtree(inputs_dir)
            data, parsed = load_recording(str(store), Identity.load(identity))
            where = f"{program / case.script}:{case.trace_line(program)}"
            plain = Inquiry(data, parsed).trace(Trace(at=where, var=case.trace, depth=case.depth))
            traced.append(Traced(case.name, data, parsed, where, case.trace, case.depth, plain))
        yield traced


def _sandboxed_traces_agree(cases: list[Traced], transport: Callable[[], Transport]) -> None:
    """Each case traced in a fresh sandbox session (one runner each) agrees with in-process;
    and the comparison can fail: one case's answer does not pass for another's."""
    from sealtrace.agent._sandbox_client import SandboxClient

    answers = []
    for case in cases:
        with SandboxClient(case.data, case.parsed, transport()) as box:
            boxed = box.trace(Trace(at=case.where, var=case.expr, depth=case.depth))
        _agree(case.plain["root"], boxed["root"])
        assert boxed["query"]["stopped_at"] == case.plain["query"]["stopped_at"], case.name
        answers.append(boxed)
    with pytest.raises(AssertionError):
        _agree(cases[1].plain["root"], answers[0]["root"])


@pytest.mark.slow
def test_sandboxed_traces_agree_with_in_process_on_every_case(traced_cases: list[Traced]) -> None:
    from sealtrace.agent._sandbox_client import LocalTransport

    _sandboxed_traces_agree(traced_cases, LocalTransport)


@pytest.mark.podman
def test_traces_from_podman_containers_agree_with_in_process_on_every_case(
    traced_cases: list[Traced], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    """The same agreement with each session in its own hardened rootless container; every
    container is gone afterwards."""
    from sealtrace.agent._podman import PodmanTransport

    client, user, _socket = podman_service
    sessions: list[str] = []

    def container() -> PodmanTransport:
        transport = PodmanTransport(client, replay_image, uid=user.pw_uid, gid=user.pw_gid)
        sessions.append(transport.directory.name)
        return transport

    _sandboxed_traces_agree(traced_cases, container)
    assert len(sessions) == len(CASES)
    left = [
        c.id
        for c in client.containers.list(all=True)
        if (c.labels or {}).get("sealtrace.session") in sessions
    ]
    assert left == []
