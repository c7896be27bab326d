"""The ground-truth corpus measured: each program traced deeply and scored, then the figures
per idiom and overall.

For each program of sealtrace.sandbox.validation.corpus:

1. it is recorded as a user would run it (sealtrace.sandbox._program_runs);
2. one plain replay notes the program line that asked for each input (sealtrace.sandbox._sites);
3. the engine traces the marked value at the corpus depth (Inquiry.trace);
4. the answer is scored against the program's truth (sealtrace.sandbox._scoring).

Figures pool the counts of the programs they cover: an idiom's precision is the correct
verdicts over the judged ones in every program that shows that idiom, its recall the truth
origins named over all of theirs. A program whose recording, replay or trace failed names
nothing: its origins count as missed, and its error is reported.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealtrace.proxy import Identity, SealtraceError

from ._inquiry import Inquiry
from ._program_runs import ProgramRun, record_program
from ._replay_process import replay
from ._scoring import FlowScore, Placed, Recorded, Score, score, score_flows, unanswered
from .questions import Flows, Trace
from .validation.corpus import DEPTH, Program
from .validation.truth import Flow, Mark, resolve

__all__ = [
    "PASS_TIMEOUT",
    "Figures",
    "FlowFigures",
    "ProgramResult",
    "figures",
    "flow_figures",
    "measure",
    "sites",
    "truth_of",
]

PASS_TIMEOUT = 180.0


@dataclass
class ProgramResult:
    program: Program
    depth: int = DEPTH
    at: str = ""
    score: Score | None = None
    truncated: bool = False
    passes: int = 0
    seconds: float = 0.0
    error: str | None = None
    flows: FlowScore | None = None  # the forward truth's score, for programs that have one
    flows_error: str | None = None
    # Truth origins never scored: the program failed before its inputs could be listed (each
    # origin of the truth counts once, an external one however many events it stands for).
    missing: int = 0

    @property
    def complete(self) -> bool:
        """Answered, and no branch cut by the depth or left unknown."""
        s = self.score
        if self.error is not None or s is None:
            return False
        return not self.truncated and s.cut == 0 and s.unknown == 0

    @property
    def control_holds(self) -> bool:
        """A negative control: complete, and no input named anywhere."""
        s = self.score
        return self.complete and s is not None and not s.inputs_named

    @property
    def correct(self) -> int:
        return self.score.correct if self.score else 0

    @property
    def judged(self) -> int:
        return self.score.judged if self.score else 0

    @property
    def found(self) -> int:
        return self.score.found if self.score else 0

    @property
    def expected(self) -> int:
        return len(self.score.expected) if self.score else self.missing

    def to_json(self) -> dict[str, Any]:
        p = self.program
        s = self.score
        out: dict[str, Any] = {
            "name": p.name,
            "suite": "corpus",
            "idioms": list(p.idioms),
            "story": p.story,
            "control": p.control,
            "at": self.at,
            "expr": p.trace,
            "depth": self.depth,
            "truncated": self.truncated,
            "complete": self.complete,
            "passes": self.passes,
            "seconds": round(self.seconds, 2),
            "error": self.error,
        }
        if p.control:
            out["control_holds"] = self.control_holds
        if p.flows is not None:
            out["flows"] = {
                "source": f"{p.flows.source}@{p.flows.file}:{p.flows.at}",
                **(self.flows.to_json() if self.flows else {"precision": None, "recall": 0.0}),
                "error": self.flows_error,
            }
        if s is not None:
            out.update(s.to_json())
        else:
            out.update(precision=None, recall=0.0 if self.missing else None, correct=0,
                       judged=0, found=0, expected=[], named=[], decoys_inside=[],
                       wrong_root=None, unknown=0, cut=0)  # fmt: skip
        return out


@dataclass
class Figures:
    cases: list[str] = field(default_factory=list)
    correct: int = 0
    judged: int = 0
    found: int = 0
    expected: int = 0

    def add(self, result: ProgramResult) -> None:
        self.cases.append(result.program.name)
        self.correct += result.correct
        self.judged += result.judged
        self.found += result.found
        self.expected += result.expected

    @property
    def precision(self) -> float | None:
        return self.correct / self.judged if self.judged else None

    @property
    def recall(self) -> float | None:
        return self.found / self.expected if self.expected else None

    def to_json(self) -> dict[str, Any]:
        return {
            "precision": _round(self.precision),
            "recall": _round(self.recall),
            "cases": self.cases,
            "correct": self.correct,
            "judged": self.judged,
            "found": self.found,
            "expected": self.expected,
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


@dataclass
class FlowFigures:
    """Forward figures pooled over the programs that have a forward truth."""

    cases: list[str] = field(default_factory=list)
    correct: int = 0
    named: int = 0
    found: int = 0
    expected: int = 0

    def add(self, result: ProgramResult) -> None:
        self.cases.append(result.program.name)
        f = result.flows
        if f is not None:
            self.correct += f.correct
            self.named += f.named
            self.found += f.found
            self.expected += len(f.expected)
        elif result.program.flows is not None:
            self.expected += len(result.program.flows.reaches)

    @property
    def precision(self) -> float | None:
        return self.correct / self.named if self.named else None

    @property
    def recall(self) -> float | None:
        return self.found / self.expected if self.expected else None

    def to_json(self) -> dict[str, Any]:
        return {
            "precision": _round(self.precision),
            "recall": _round(self.recall),
            "cases": self.cases,
            "correct": self.correct,
            "named": self.named,
            "found": self.found,
            "expected": self.expected,
        }


def flow_figures(results: Iterable[ProgramResult]) -> FlowFigures:
    out = FlowFigures()
    for r in results:
        if r.program.flows is not None:
            out.add(r)
    return out


def figures(results: Iterable[ProgramResult]) -> tuple[Figures, dict[str, Figures]]:
    """Overall, and per idiom (sorted by name)."""
    overall = Figures()
    idioms: dict[str, Figures] = {}
    for r in results:
        overall.add(r)
        for idiom in r.program.idioms:
            idioms.setdefault(idiom, Figures()).add(r)
    return overall, dict(sorted(idioms.items()))


def truth_of(program: Program, root: Path) -> list[Placed]:
    return [Placed(role, mark, resolve(mark, role, root)) for role, mark in program.truth.roles()]


def sites(run: ProgramRun) -> Recorded:
    """The sites pass over a recording, as the scoring reads it."""
    receipt = replay(run.data, run.parsed.meta, timeout=PASS_TIMEOUT, query={"kind": "sites"})
    if receipt.status != "query":
        raise SealtraceError(f"the sites pass did not finish: {receipt.message()}")
    return Recorded.from_recording(run.parsed, receipt.data["result"], str(run.root))


def measure(
    program: Program,
    work: Path,
    recipient: Path,
    identity: Identity,
    *,
    depth: int = DEPTH,
) -> ProgramResult:
    """Record, trace and score one program (its scratch directory is `work`)."""
    result = ProgramResult(program, depth=depth)
    started = time.monotonic()
    try:
        result.missing = len(program.truth.origins)
        run = record_program(
            program.program, program.script, program.make_inputs, work, recipient, identity
        )
        placed = truth_of(program, run.root)
        recorded = sites(run)
        result.score = unanswered(placed, recorded)  # until the engine answers
        line = program.trace_line(run.root)
        result.at = f"{program.script}:{line}"
        inquiry = Inquiry(run.data, run.parsed, timeout=PASS_TIMEOUT)
        try:
            answer = inquiry.trace(Trace(at=f"{run.script}:{line}", var=program.trace, depth=depth))
        finally:
            result.passes = inquiry.passes
        result.truncated = bool(answer["query"].get("truncated"))
        result.score = score(answer, placed, recorded)
        if program.flows is not None:
            try:
                result.flows = _flows(program.flows, run, inquiry, recorded)
            except (SealtraceError, OSError, ValueError, subprocess.SubprocessError) as exc:
                result.flows_error = f"{exc.__class__.__name__}: {exc}"
    except (SealtraceError, OSError, ValueError, subprocess.SubprocessError) as exc:
        result.error = f"{exc.__class__.__name__}: {exc}"
    result.seconds = time.monotonic() - started
    return result


def _flows(flow: Flow, run: ProgramRun, inquiry: Inquiry, rec: Recorded) -> FlowScore:
    """Follow the flow's source forward (`flows`) and score the outputs it names."""
    at = resolve(Mark("any", flow.at, flow.file), "flow", run.root)
    reaches = [Placed("flow", m, resolve(m, "flow", run.root)) for m in flow.reaches]
    avoids = [Placed("flow", m, resolve(m, "flow", run.root)) for m in flow.avoids]
    line = at.rsplit(":", 1)[1]
    answer = inquiry.flows(Flows(source=f"{flow.source}@{run.root / flow.file}:{line}"))
    outputs = [int(o["event"]) for o in answer["outputs"]]
    return score_flows(outputs, reaches, avoids, rec)
