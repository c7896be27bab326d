"""The depth property: a deeper trace only extends a shallower one, and says when it is cut.

`trace --depth N` bounds how far back an answer goes. Two promises come with the bound
(issue 22, item 3), checked here on every corpus program (`sealtrace validate
--depth-property`):

- Monotonic: the answer at depth n is a prefix of the answer at a larger depth m. Walking
  both trees from the root, every node the shallower one shows is the same step in the
  deeper one (counter, operation, place and origin kind), and every node it expanded has the
  same inputs, in the same order. Only nodes the shallower answer left unexpanded may gain
  inputs.
- Honest truncation: `truncated` is true exactly when the answer cut a branch (a step shown
  with neither an origin nor its inputs). Both ways are checked: a cut answer that says
  `truncated: false`, and an uncut one that says `truncated: true`, are violations.

Each program is recorded once and traced at every depth of DEPTHS with one locate, one slice
per depth and one shared capture (Inquiry.traces); consecutive depths of the list are
compared. A program whose recording or trace fails reports its error, not a verdict.
"""

from __future__ import annotations

import itertools
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sealtrace.proxy import Identity, SealtraceError, write_keypair

from ._errors import ValidationError
from ._inquiry import Inquiry
from ._program_runs import parallel, record_program
from .questions import Trace
from .validation.corpus import Program

__all__ = [
    "DEPTHS",
    "ProgramProperty",
    "PropertyReport",
    "Violation",
    "check_corpus",
    "check_program",
    "compare",
    "cut",
    "render_property",
]

DEPTHS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 25, 32, 48, 64)
PASS_TIMEOUT = 180.0
KINDS = ("prefix", "truncated-false", "truncated-true")


@dataclass(frozen=True)
class Violation:
    kind: str  # prefix | truncated-false | truncated-true
    depth: int  # the shallower depth (for truncation: the depth whose answer is wrong)
    deeper: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "depth": self.depth,
            "deeper": self.deeper,
            "detail": self.detail,
        }


@dataclass
class ProgramProperty:
    program: Program
    depths: tuple[int, ...] = DEPTHS
    violations: list[Violation] = field(default_factory=list)
    truncated: dict[int, bool] = field(default_factory=dict)
    cut: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    @property
    def holds(self) -> bool:
        return self.error is None and not self.violations

    @property
    def kinds(self) -> list[str]:
        return sorted({v.kind for v in self.violations})

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.program.name,
            "holds": self.holds,
            "kinds": self.kinds,
            "violations": [v.to_json() for v in self.violations],
            "truncated": {str(d): t for d, t in self.truncated.items()},
            "cut": {str(d): n for d, n in self.cut.items()},
            "seconds": round(self.seconds, 2),
            "error": self.error,
        }


@dataclass
class PropertyReport:
    results: list[ProgramProperty]
    seconds: float
    depths: tuple[int, ...] = DEPTHS

    @property
    def ok(self) -> bool:
        return all(r.holds for r in self.results)

    def counts(self) -> dict[str, int]:
        return {k: sum(k in r.kinds for r in self.results) for k in KINDS}

    def summary(self) -> str:
        held = sum(r.holds for r in self.results)
        text = f"depth property holds on {held}/{len(self.results)} programs"
        broken = {k: n for k, n in self.counts().items() if n}
        if broken:
            text += "; violations: " + ", ".join(f"{k} in {n}" for k, n in broken.items())
        errors = [r.program.name for r in self.results if r.error]
        if errors:
            text += f"; errors: {', '.join(errors)}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "depths": list(self.depths),
            "holds": sum(r.holds for r in self.results),
            "programs": len(self.results),
            "violations": self.counts(),
            "seconds": round(self.seconds, 2),
            "cases": [r.to_json() for r in self.results],
        }

    def raise_for(self) -> None:
        if not self.ok:
            raise ValidationError(f"the depth property failed: {self.summary()}")


# -- comparing answers ------------------------------------------------------------------


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def ident(n: Mapping[str, Any]) -> tuple[Any, ...]:
        origin = n.get("origin") or {}
        return (
            n["counter"],
            n["op"],
            n["file"],
            n["line"],
            origin.get("kind"),
            origin.get("event"),
        )

    return ident(a) == ident(b)


def _describe(n: Mapping[str, Any]) -> str:
    origin = (n.get("origin") or {}).get("kind")
    where = f"{Path(str(n['file'])).name}:{n['line']}" if n["file"] else "-"
    return f"step {n['counter']} {n['op']} at {where}" + (f" ({origin})" if origin else "")


def compare(shallow: Mapping[str, Any], deep: Mapping[str, Any]) -> str | None:
    """Why `shallow` (a NODE) is not a prefix of `deep`, or None when it is."""
    stack: list[tuple[Mapping[str, Any], Mapping[str, Any], str]] = [(shallow, deep, "root")]
    while stack:
        a, b, path = stack.pop()
        if not _same(a, b):
            return f"{path}: {_describe(a)} became {_describe(b)}"
        inputs_a, inputs_b = a.get("inputs") or [], b.get("inputs") or []
        if not inputs_a:
            continue  # left unexpanded (or shown again): the deeper answer may go on
        if len(inputs_a) != len(inputs_b):
            return f"{path}: {_describe(a)} has {len(inputs_a)} inputs, then {len(inputs_b)}"
        for i, (x, y) in enumerate(zip(inputs_a, inputs_b, strict=True)):
            stack.append((x, y, f"{path}.{i}"))
    return None


def _walk(node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.get("inputs") or [])


def cut(root: Mapping[str, Any]) -> int:
    """Steps the answer left unexpanded: no origin, and no inputs wherever they are shown (a
    step expanded once appears again elsewhere without its inputs)."""
    expanded = {(n["counter"], n["op"]) for n in _walk(root) if n.get("inputs")}
    open_steps = {
        (n["counter"], n["op"]) for n in _walk(root) if not n.get("origin") and not n.get("inputs")
    }
    return len(open_steps - expanded)


def judge(answers: Mapping[int, Mapping[str, Any]], result: ProgramProperty) -> None:
    depths = sorted(answers)
    for d in depths:
        answer = answers[d]
        result.cut[d] = cut(answer["root"])
        result.truncated[d] = bool(answer["query"].get("truncated"))
        if result.cut[d] and not result.truncated[d]:
            detail = f"{result.cut[d]} steps left unexpanded, and truncated is false"
            result.violations.append(Violation("truncated-false", d, None, detail))
        elif result.truncated[d] and not result.cut[d]:
            detail = "truncated is true, and no step was left unexpanded"
            result.violations.append(Violation("truncated-true", d, None, detail))
    for shallow, deep in itertools.pairwise(depths):
        why = compare(answers[shallow]["root"], answers[deep]["root"])
        if why is not None:
            result.violations.append(Violation("prefix", shallow, deep, why))


# -- running it -------------------------------------------------------------------------


def check_program(
    program: Program,
    work: Path,
    recipient: Path,
    identity: Identity,
    depths: Sequence[int] = DEPTHS,
) -> ProgramProperty:
    result = ProgramProperty(program, tuple(depths))
    started = time.monotonic()
    try:
        run = record_program(
            program.program, program.script, program.make_inputs, work, recipient, identity
        )
        at = f"{run.script}:{program.trace_line(run.root)}"
        inquiry = Inquiry(run.data, run.parsed, timeout=PASS_TIMEOUT)
        answers = inquiry.traces(Trace(at=at, var=program.trace), depths)
        judge(answers, result)
    except (SealtraceError, OSError, ValueError, subprocess.SubprocessError) as exc:
        result.error = f"{exc.__class__.__name__}: {exc}"
    result.seconds = time.monotonic() - started
    return result


def check_corpus(
    programs: Sequence[Program], *, jobs: int = 0, depths: Sequence[int] = DEPTHS
) -> PropertyReport:
    """Every program in a temporary directory, removed (recordings, key) before returning."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sealtrace-depth-") as tmp:
        work = Path(tmp)
        recipient, identity = write_keypair(work / "keys", "depth")
        key = Identity.load(identity)
        results = parallel(
            lambda p: check_program(p, work / p.name, recipient, key, depths), programs, jobs
        )
    return PropertyReport(results, time.monotonic() - started, tuple(depths))


def render_property(report: PropertyReport) -> str:
    rows = [("program", "result", "first violation", "cut at depths", "seconds")]
    for r in report.results:
        first = r.violations[0] if r.violations else None
        text = "-"
        if first is not None:
            span = f"{first.depth}->{first.deeper}" if first.deeper else str(first.depth)
            text = f"{first.kind} at {span}: {first.detail}"
        cut_at = ",".join(str(d) for d, n in r.cut.items() if n) or "none"
        verdict = "holds" if r.holds else ("ERROR" if r.error else "FAILS")
        rows.append(
            (r.program.name, verdict, _clip(text, 90), _clip(cut_at, 30), f"{r.seconds:.1f}")
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines += [f"{r.program.name}: {r.error}" for r in report.results if r.error]
    lines.append(f"depths {', '.join(map(str, report.depths))}")
    lines.append(report.summary() + f" in {report.seconds:.1f}s")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
