"""`sealtrace validate`: the provenance engine checked against programs with known answers.

Each case of the suite (sealtrace.sandbox.validation.cases) is run the way a user would run
a program:

1. Its program is copied into a temporary directory, and its inputs are written beside it.
2. `sealtrace record` records it under a fresh key pair.
3. Its inputs are deleted.
4. The engine traces the value (Inquiry.trace).
5. The slice is reduced to ranked candidate root causes (sealtrace.sandbox._ranking).

A planted case passes when the first candidate is the planted origin: the same kind, at the
same place, and with the marked value when one line reads several inputs. Top-1 precision
is the share of planted cases that pass. The negative control passes when its slice is
complete (not cut by the depth limit) and every origin in it is a constant: no input, and
nothing of unknown origin. The command exits 0 only when precision is 1.00 and the control
passes, else 3.

This command must never leave a plaintext recording or a private key behind. Both exist
only in a temporary directory, which is removed when the run ends, whatever the outcome.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from sealtrace.proxy import Identity, SealtraceError, UsageError, write_keypair
from sealtrace.proxy.cli import JsonOpt, guarded

from ._errors import ValidationError
from ._inquiry import Inquiry
from ._ranking import Candidate, NamedConstants, rank, slice_origins
from ._replay_process import load_recording
from .questions import Trace
from .validation.cases import CASES, Case

__all__ = ["CaseResult", "Report", "run_case", "run_suite", "select_cases", "validate"]

RECORD_TIMEOUT = 120.0
PASS_TIMEOUT = 120.0
_SHOWN = 3  # candidates listed per case in the report


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

    @property
    def planted(self) -> list[CaseResult]:
        return [r for r in self.results if not r.case.is_control]

    @property
    def controls(self) -> list[CaseResult]:
        return [r for r in self.results if r.case.is_control]

    @property
    def precision(self) -> float:
        planted = self.planted
        return sum(r.passed for r in planted) / len(planted) if planted else 1.0

    @property
    def control_passed(self) -> bool:
        return all(r.passed for r in self.controls)

    @property
    def ok(self) -> bool:
        return self.precision == 1.0 and self.control_passed

    def summary(self) -> str:
        planted = self.planted
        text = (
            f"top-1 precision {self.precision:.2f} "
            f"({sum(r.passed for r in planted)}/{len(planted)})"
        )
        if self.controls:
            state = "passed" if self.control_passed else "FAILED"
            text += f"; negative control {state}"
        failed = [r.case.name for r in self.results if not r.passed]
        if failed:
            text += f"; failing: {', '.join(failed)}"
        return text

    def to_json(self) -> dict[str, Any]:
        planted = self.planted
        return {
            "ok": self.ok,
            "precision": self.precision,
            "top1_correct": sum(r.passed for r in planted),
            "planted_cases": len(planted),
            "negative_control": {
                "passed": self.control_passed,
                "cases": [r.case.name for r in self.controls],
            },
            "seconds": round(self.seconds, 2),
            "cases": [r.to_json() for r in self.results],
        }

    def raise_for(self) -> None:
        if not self.ok:
            raise ValidationError(f"validation failed: {self.summary()}")


def select_cases(names: Sequence[str] | None) -> list[Case]:
    if not names:
        return list(CASES)
    by_name = {case.name: case for case in CASES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UsageError(f"no case named {', '.join(unknown)} (cases: {', '.join(by_name)})")
    return [by_name[n] for n in names]


def run_suite(cases: Sequence[Case] | None = None, *, jobs: int = 0) -> Report:
    """Record and trace each case in a temporary directory; the directory, with every
    plaintext recording and the private key, is removed before this returns."""
    cases = list(CASES if cases is None else cases)
    workers = max(1, min(len(cases), jobs or os.cpu_count() or 1))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sealtrace-validate-") as tmp:
        work = Path(tmp)
        recipient, identity = write_keypair(work / "keys", "validate")
        key = Identity.load(identity)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(lambda c: run_case(c, work / c.name, recipient, key), cases))
    return Report(results, time.monotonic() - started)


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
    program = work / "program"
    inputs_dir = work / "inputs"
    store = work / "recording"
    shutil.copytree(case.program, program)
    inputs_dir.mkdir()
    inputs = case.make_inputs(inputs_dir)
    line = case.trace_line(program)
    result.at = f"{case.script}:{line}"
    if case.truth is not None:
        result.truth_where = case.truth_where(program)
    proc = subprocess.run(
        [
            *_sealtrace(),
            "record",
            "--recipient",
            str(recipient),
            "--output",
            str(store),
            "--app-root",
            str(program),
            "--",
            sys.executable,
            str(program / case.script),
            *inputs.args,
        ],
        cwd=inputs_dir,
        env={**os.environ, **inputs.env},
        capture_output=True,
        timeout=RECORD_TIMEOUT,
        check=False,
    )
    shutil.rmtree(inputs_dir)  # replay must not need them
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0 or "sealtrace:" in stderr:
        tail = stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise ValidationError(f"recording the program failed: {tail[0]}")
    data, parsed = load_recording(str(store), identity)
    inquiry = Inquiry(data, parsed, timeout=PASS_TIMEOUT)
    try:
        doc = inquiry.trace(
            Trace(at=f"{program / case.script}:{line}", var=case.trace, depth=case.depth)
        )
    finally:
        result.passes = inquiry.passes
    root = doc["root"]
    result.ranked = rank(root, NamedConstants.from_recording(parsed), program)
    kinds, complete = slice_origins(root)
    result.complete = complete and not doc["query"].get("truncated")
    result.origin_kinds = sorted(kinds)


def _sealtrace() -> list[str]:
    """The `sealtrace` console script next to this interpreter, as a user would run it."""
    script = Path(sys.executable).with_name("sealtrace")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "sealtrace.proxy.cli"]


# -- the command -----------------------------------------------------------------------------

CaseOpt = Annotated[
    list[str] | None, typer.Option("--case", help="Run only this case (repeatable).")
]
JobsOpt = Annotated[
    int, typer.Option("--jobs", help="Cases run at once (default: one per CPU).", min=0)
]


@guarded
def validate(cases: CaseOpt = None, jobs: JobsOpt = 0, as_json: JsonOpt = False) -> None:
    """Check the provenance engine on programs with planted root causes.

    Exit 0 when top-1 precision is 1.00 and the negative control passes, 3 otherwise.
    """
    report = run_suite(select_cases(cases), jobs=jobs)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        typer.echo(render(report))
    report.raise_for()


def render(report: Report) -> str:
    rows = [("case", "result", "top-1", "planted", "passes", "seconds")]
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
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    for r in report.results:
        if r.error:
            lines.append(f"{r.case.name}: {r.error}")
    lines.append(report.summary() + f" in {report.seconds:.1f}s")
    return "\n".join(lines)
