"""`sealtrace validate`: the provenance engine checked against programs with known answers.

Two suites, run the way a user runs a program (sealtrace.sandbox._program_runs: copied
into a scratch directory, inputs written beside it, recorded under a fresh key pair, inputs
deleted):

- The planted root causes (sealtrace.sandbox.validation.cases). Each case's value is
  traced to its case's depth and the slice is reduced to ranked candidate root causes
  (sealtrace.sandbox._ranking). A case passes when the first candidate is the planted
  origin: the same kind, at the same place, and with the marked value when one line reads
  several inputs. Top-1 precision is the share of planted cases that pass. The negative
  control passes when its slice is complete (not cut by the depth limit) and every origin in
  it is a constant.
- The ground-truth corpus (sealtrace.sandbox.validation.corpus, measured by
  sealtrace.sandbox._measurement): every program's value traced at the corpus depth and
  scored against its truth, giving precision and recall per idiom and overall. Its negative
  controls hold when their answer is complete and names no input.

The command exits 0 only when top-1 precision is 1.00, the corpus's precision is 1.00 and its
recall at least RECALL_TARGET, and every negative control holds; else 3. With
`--depth-property` it checks instead that a deeper trace only extends a shallower one
(sealtrace.sandbox._depth_property).

This command must never leave a plaintext recording or a private key behind. Both exist
only in a temporary directory, which is removed when the run ends, whatever the outcome.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from sealtrace.proxy import Identity, SealtraceError, UsageError, write_keypair
from sealtrace.proxy.cli import JsonOpt, guarded

from ._errors import ValidationError
from ._inquiry import Inquiry
from ._measurement import Figures, ProgramResult, figures, flow_figures, measure
from ._program_runs import parallel, record_program, sealtrace_command
from ._ranking import Candidate, NamedConstants, rank, slice_origins
from .questions import Trace
from .validation.cases import CASES, Case
from .validation.corpus import CORPUS, DEPTH, Program

__all__ = [
    "RECALL_TARGET",
    "CaseResult",
    "Report",
    "run_case",
    "run_suite",
    "select",
    "validate",
]

PASS_TIMEOUT = 120.0
RECALL_TARGET = 0.95
_SHOWN = 3  # candidates listed per case in the report
SUITES = ("all", "ranking", "corpus")


@dataclass
class CaseResult:
    case: Case
    passed: bool = False
    at: str = ""
    truth_where: str | None = None
    ranked: list[Candidate] = field(default_factory=list)
    origin_kinds: list[str] = field(default_factory=list)
    complete: bool = False
    passes: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def truth(self) -> str | None:
        if self.case.truth is None or self.truth_where is None:
            return None
        return f"{self.case.truth.kind} {self.truth_where}"

    @property
    def top(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None

    @property
    def truth_rank(self) -> int | None:
        """1-based position of the planted origin among the candidates, if it is there."""
        for n, candidate in enumerate(self.ranked, 1):
            if self._is_truth(candidate):
                return n
        return None

    def _is_truth(self, candidate: Candidate) -> bool:
        truth = self.case.truth
        if truth is None:
            return False
        return (
            candidate.kind == truth.kind
            and candidate.where == self.truth_where
            and (truth.value is None or truth.value in (candidate.value or ""))
        )

    def judge(self) -> None:
        if self.error is not None:
            self.passed = False
        elif self.case.is_control:
            self.passed = self.complete and set(self.origin_kinds) <= {"constant"}
        else:
            self.passed = self.top is not None and self._is_truth(self.top)

    def to_json(self) -> dict[str, Any]:
        case = self.case
        top = self.top
        return {
            "name": case.name,
            "suite": "ranking",
            "plants": case.plants,
            "control": case.is_control,
            "passed": self.passed,
            "at": self.at,
            "expr": case.trace,
            "depth": case.depth,
            "truth": self.truth,
            "truth_value": case.truth.value if case.truth else None,
            "top1": top.to_json() if top else None,
            "truth_rank": self.truth_rank,
            "candidates": [c.to_json() for c in self.ranked[:_SHOWN]],
            "origin_kinds": self.origin_kinds,
            "complete": self.complete,
            "passes": self.passes,
            "seconds": round(self.seconds, 2),
            "error": self.error,
        }


@dataclass
class Report:
    results: list[CaseResult]
    seconds: float
    corpus: list[ProgramResult] = field(default_factory=list)

    # -- the planted root causes ----------------------------------------------------------

    @property
    def planted(self) -> list[CaseResult]:
        return [r for r in self.results if not r.case.is_control]

    @property
    def controls(self) -> list[CaseResult]:
        return [r for r in self.results if r.case.is_control]

    @property
    def top1_precision(self) -> float:
        planted = self.planted
        return sum(r.passed for r in planted) / len(planted) if planted else 1.0

    # -- the corpus -----------------------------------------------------------------------

    @property
    def corpus_controls(self) -> list[ProgramResult]:
        return [r for r in self.corpus if r.program.control]

    @property
    def figures(self) -> tuple[Figures, dict[str, Figures]]:
        return figures(self.corpus)

    @property
    def corpus_ok(self) -> bool:
        if not self.corpus:
            return True
        overall, _ = self.figures
        return (overall.precision or 0.0) == 1.0 and (overall.recall or 0.0) >= RECALL_TARGET

    # -- both -----------------------------------------------------------------------------

    @property
    def control_passed(self) -> bool:
        return all(r.passed for r in self.controls) and all(
            r.control_holds for r in self.corpus_controls
        )

    @property
    def ok(self) -> bool:
        return self.top1_precision == 1.0 and self.control_passed and self.corpus_ok

    def summary(self) -> str:
        parts = []
        if self.results:
            planted = self.planted
            parts.append(
                f"top-1 precision {self.top1_precision:.2f} "
                f"({sum(r.passed for r in planted)}/{len(planted)})"
            )
        if self.corpus:
            overall, _ = self.figures
            parts.append(
                f"corpus precision {_figure(overall.precision)} "
                f"({overall.correct}/{overall.judged}), recall {_figure(overall.recall)} "
                f"({overall.found}/{overall.expected}) on {len(self.corpus)} programs"
            )
        if self.controls or self.corpus_controls:
            state = "passed" if self.control_passed else "FAILED"
            parts.append(f"negative control {state}")
        failed = [r.case.name for r in self.results if not r.passed]
        failed += [r.program.name for r in self.corpus_controls if not r.control_holds]
        if failed:
            parts.append(f"failing: {', '.join(failed)}")
        errors = [r.program.name for r in self.corpus if r.error]
        if errors:
            parts.append(f"errors: {', '.join(errors)}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        planted = self.planted
        overall, idioms = self.figures
        controls = [r.case.name for r in self.controls] + [
            r.program.name for r in self.corpus_controls
        ]
        return {
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "top1_precision": self.top1_precision,
            "top1_correct": sum(r.passed for r in planted),
            "planted_cases": len(planted),
            "depth": DEPTH,
            "precision": overall.to_json()["precision"],
            "recall": overall.to_json()["recall"],
            "recall_target": RECALL_TARGET,
            "corpus": overall.to_json(),
            "idioms": {name: f.to_json() for name, f in idioms.items()},
            "flows": flow_figures(self.corpus).to_json(),
            "negative_control": {"passed": self.control_passed, "cases": controls},
            "cases": [r.to_json() for r in self.results] + [r.to_json() for r in self.corpus],
        }

    def raise_for(self) -> None:
        if not self.ok:
            raise ValidationError(f"validation failed: {self.summary()}")


def _figure(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def select(names: Sequence[str] | None, suite: str = "all") -> tuple[list[Case], list[Program]]:
    """The ranking cases and corpus programs to run: a suite, narrowed to `names`."""
    if suite not in SUITES:
        raise UsageError(f"no suite named {suite} (suites: {', '.join(SUITES)})")
    cases = list(CASES) if suite in ("all", "ranking") else []
    programs = list(CORPUS) if suite in ("all", "corpus") else []
    if not names:
        return cases, programs
    by_name: dict[str, Case | Program] = {c.name: c for c in cases}
    by_name.update({p.name: p for p in programs})
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(f"no case named {', '.join(unknown)} (cases: {', '.join(by_name)})")
    return (
        [c for c in cases if c.name in names],
        [p for p in programs if p.name in names],
    )


def run_suite(
    cases: Sequence[Case] | None = None,
    *,
    jobs: int = 0,
    programs: Sequence[Program] = (),
) -> Report:
    """Record and trace each case and program in a temporary directory; the directory, with
    every plaintext recording and the private key, is removed before this returns."""
    cases = list(CASES if cases is None else cases)
    programs = list(programs)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sealtrace-validate-") as tmp:
        work = Path(tmp)
        recipient, identity = write_keypair(work / "keys", "validate")
        key = Identity.load(identity)
        results = parallel(
            lambda c: run_case(c, work / "ranking" / c.name, recipient, key), cases, jobs
        )
        corpus = parallel(
            lambda p: measure(p, work / "corpus" / p.name, recipient, key), programs, jobs
        )
    return Report(results, time.monotonic() - started, corpus)


def run_case(case: Case, work: Path, recipient: Path, identity: Identity) -> CaseResult:
    result = CaseResult(case)
    started = time.monotonic()
    try:
        _trace_case(case, work, recipient, identity, result)
    except (SealtraceError, OSError, ValueError, subprocess.SubprocessError) as exc:
        result.error = f"{exc.__class__.__name__}: {exc}"
    result.seconds = time.monotonic() - started
    result.judge()
    return result


def _trace_case(
    case: Case, work: Path, recipient: Path, identity: Identity, result: CaseResult
) -> None:
    run = record_program(case.program, case.script, case.make_inputs, work, recipient, identity)
    line = case.trace_line(run.root)
    result.at = f"{case.script}:{line}"
    if case.truth is not None:
        result.truth_where = case.truth_where(run.root)
    inquiry = Inquiry(run.data, run.parsed, timeout=PASS_TIMEOUT)
    try:
        doc = inquiry.trace(Trace(at=f"{run.script}:{line}", var=case.trace, depth=case.depth))
    finally:
        result.passes = inquiry.passes
    root = doc["root"]
    result.ranked = rank(root, NamedConstants.from_recording(run.parsed), run.root)
    kinds, complete = slice_origins(root)
    result.complete = complete and not doc["query"].get("truncated")
    result.origin_kinds = sorted(kinds)


_sealtrace = sealtrace_command  # the console script, as the tests run it


# -- the command -----------------------------------------------------------------------------

CaseOpt = Annotated[
    list[str] | None, typer.Option("--case", help="Run only this case (repeatable).")
]
SuiteOpt = Annotated[
    str,
    typer.Option(
        "--suite",
        help="all, ranking (planted root causes) or corpus (ground-truth precision and recall).",
    ),
]
JobsOpt = Annotated[
    int, typer.Option("--jobs", help="Cases run at once (default: one per CPU).", min=0)
]
DepthPropertyOpt = Annotated[
    bool,
    typer.Option(
        "--depth-property",
        help="Check on the corpus that a deeper trace only extends a shallower one.",
    ),
]


@guarded
def validate(
    cases: CaseOpt = None,
    suite: SuiteOpt = "all",
    jobs: JobsOpt = 0,
    depth_property: DepthPropertyOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Check the provenance engine on programs with known answers.

    Exit 0 when top-1 precision is 1.00, the corpus's precision is 1.00 and its recall at
    least 0.95, and every negative control holds; 3 otherwise.
    """
    if depth_property:
        from ._depth_property import check_corpus, render_property

        _, programs = select(cases, "corpus")
        prop = check_corpus(programs, jobs=jobs)
        typer.echo(
            json.dumps(prop.to_json(), indent=2, sort_keys=True)
            if as_json
            else render_property(prop)
        )
        prop.raise_for()
        return
    ranking, programs = select(cases, suite)
    report = run_suite(ranking, jobs=jobs, programs=programs)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        typer.echo(render(report))
    report.raise_for()


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def render(report: Report) -> str:
    lines: list[str] = []
    if report.results:
        lines += _ranking_table(report)
        lines += [f"{r.case.name}: {r.error}" for r in report.results if r.error]
        lines.append("")
    if report.corpus:
        lines += _corpus_table(report)
        lines += [f"{p.program.name}: {p.error}" for p in report.corpus if p.error]
        lines.append("")
        lines += _idiom_table(report)
        forward = flow_figures(report.corpus)
        if forward.cases:
            lines.append(
                f"flows (forward, outputs reached): precision {_figure(forward.precision)} "
                f"({forward.correct}/{forward.named}), recall {_figure(forward.recall)} "
                f"({forward.found}/{forward.expected}) on {len(forward.cases)} programs"
            )
        lines.append(f"traced at depth {DEPTH}; target: precision 1.00, recall {RECALL_TARGET:.2f}")
    lines.append(report.summary() + f" in {report.seconds:.1f}s")
    return "\n".join(lines)


def _ranking_table(report: Report) -> list[str]:
    rows: list[tuple[str, ...]] = [("case", "result", "top-1", "planted", "passes", "seconds")]
    for r in report.results:
        top = r.top.describe() if r.top else "none"
        if r.case.is_control:
            reached = sorted(set(r.origin_kinds) - {"constant"})
            truth = "no input origin"
            top = "origins: " + ", ".join(reached or ["constants only"])
            if not r.complete:
                top += " (slice cut by depth)"
        else:
            truth = r.truth or "-"
        verdict = "pass" if r.passed else "FAIL"
        rows.append((r.case.name, verdict, top, truth, str(r.passes), f"{r.seconds:.1f}"))
    return _table(rows)


def _corpus_table(report: Report) -> list[str]:
    """One row per program: correct/judged origins, named/expected origins, what it got
    wrong, and the branches it could not follow or cut."""
    rows: list[tuple[str, ...]] = [
        ("program", "precision", "recall", "wrong", "unknown", "cut", "seconds")
    ]
    for p in report.corpus:
        s = p.score
        wrong = [
            f"{n.verdict} {n.where} {_clip(n.value or '?', 16)}"
            for n in (s.named if s else [])
            if n.judged and not n.correct
        ]
        wrong += [f"decoy inside {name}" for name in (s.leaked if s else [])]
        if s is not None and s.wrong_root is not None:
            wrong.append(f"wrong root ({s.wrong_root})")
        text = ", ".join(wrong) or "-"
        if p.program.control:
            text = ("holds" if p.control_holds else "control FAILED") + (
                f"; {text}" if wrong else ""
            )
        rows.append(
            (
                p.program.name,
                f"{p.correct}/{p.judged}",
                f"{p.found}/{p.expected}",
                _clip(text, 80),
                str(s.unknown) if s else "-",
                str(s.cut) if s else "-",
                f"{p.seconds:.1f}",
            )
        )
    return _table(rows)


def _idiom_table(report: Report) -> list[str]:
    overall, idioms = report.figures
    rows: list[tuple[str, ...]] = [("idiom", "precision", "recall", "programs")]
    for name, f in [*idioms.items(), ("overall", overall)]:
        rows.append((name, _figure(f.precision), _figure(f.recall), str(len(f.cases))))
    return _table(rows)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
