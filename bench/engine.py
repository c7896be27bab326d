"""Provenance engine cost: replay with the engine attached against plain CPython, and the
latency of one provenance jump deep into a run.

    .venv/bin/python bench/engine.py [--quick] [--report-only | --questions-only |
                                      --workloads-only]

Workloads run in fresh processes, plain and traced, interleaved, REPEATS times each; a run
counts its own wall time around the workload (not interpreter start) and its peak RSS. The
slowdown of a workload is the median over repeats of traced/plain, for each of the engine's
two ways of seeing instructions: its own evaluation loop (`loop`) and CPython's loop with
a trace callback (`traced`, the reference); both must count the same instructions. A jump
is one capture pass: re-executing a recorded run to an instruction near its end and
describing it, at 1M and 10M instructions. The report is the size test: a pure-Python
sales report that keeps every order of a 1M-row CSV export alive as a small dict, run plain
and then recorded and asked one question with `sealtrace trace`, the way a user asks, with
the peak memory of each (every process it started, summed while they run) and whether the
answer is complete. The questions are a first answer and further ones, in-process and in a
session, beside the way before and the plain run (see questions()). --report-only,
--questions-only and --workloads-only run that part alone and update it in the results.
Prints a table and writes bench/results/engine.json.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from _machine import machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engine.json"
REPEATS = 5
REPORT_ROWS = 1_000_000

WORKLOADS: dict[str, str] = {
    "pure-Python loop": """
        total = 0
        for i in range(400_000):
            total += i * 3 % 7
    """,
    "recursion": """
        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        fib(22)
    """,
    "object/attribute churn": """
        class Point:
            def __init__(self, x, y):
                self.x = x
                self.y = y
            def moved(self, dx):
                return Point(self.x + dx, self.y)
        p = Point(0, 0)
        for i in range(60_000):
            p = p.moved(1)
            p.y = p.x * 2
    """,
    "dict/list churn": """
        rows = []
        for i in range(60_000):
            d = {"id": i, "name": "n" + str(i % 100)}
            d["score"] = d["id"] * 2
            rows.append(d)
        index = {r["name"]: r for r in rows}
        picked = [index[k]["score"] for k in sorted(index)]
    """,
    "string building": """
        parts = []
        for i in range(60_000):
            parts.append(f"{i:05d}:{i * 7 % 13}")
        text = ",".join(parts)
        words = text.split(",")
        upper = [w.upper() for w in words if w.endswith("3")]
    """,
    "library: difflib + json": """
        import difflib, json
        a = [f"line {i} {i * 7 % 11}" for i in range(700)]
        b = [f"line {i} {i * 5 % 11}" for i in range(700)]
        diff = list(difflib.unified_diff(a, b, lineterm=""))
        doc = json.loads(json.dumps({"diff": diff, "n": len(diff)}))
    """,
    # What every program does first: module bodies, class bodies and decorators, each code
    # object met once (the engine's per-code work shows here, not in a hot loop).
    "imports: a service's stdlib": """
        import argparse, asyncio, csv, decimal, email.mime.multipart, http.server
        import logging.handlers, sqlite3, urllib.request, xml.etree.ElementTree
    """,
}

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    mode, source = sys.argv[1], sys.argv[2]
    code = compile(source, "<workload>", "exec")
    engine = None
    if mode in ("traced", "loop"):
        from sealtrace._engine import Engine
        engine = Engine(lambda filename: False, eval_loop=mode == "loop")
        engine.attach()
    start = time.perf_counter()
    exec(code, {"__name__": "__main__"})
    seconds = time.perf_counter() - start
    instructions = 0
    if engine is not None:
        engine.detach()
        instructions = engine.counter
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_kib": peak, "instructions": instructions}))
    """
)


def _run(mode: str, source: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, textwrap.dedent(source)],
        capture_output=True,
        check=True,
        timeout=600,
        # One hash seed for every run: a set's order (an import's module bodies iterate some)
        # would otherwise change what runs, and the two ways must count the same instructions.
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def workloads(repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name, source in WORKLOADS.items():
        plain, traced, loop = [], [], []
        for _ in range(repeats):
            plain.append(_run("plain", source))
            traced.append(_run("traced", source))
            loop.append(_run("loop", source))
        ratios = [t["seconds"] / p["seconds"] for p, t in zip(plain, traced, strict=True)]
        loop_ratios = [t["seconds"] / p["seconds"] for p, t in zip(plain, loop, strict=True)]
        if loop[0]["instructions"] != traced[0]["instructions"]:
            raise SystemExit(f"{name}: the two ways counted different instructions")
        rows.append(
            {
                "workload": name,
                "plain_seconds": statistics.median(p["seconds"] for p in plain),
                "traced_seconds": statistics.median(t["seconds"] for t in traced),
                "loop_seconds": statistics.median(t["seconds"] for t in loop),
                "slowdown": statistics.median(ratios),
                "loop_slowdown": statistics.median(loop_ratios),
                "instructions": traced[0]["instructions"],
                "plain_peak_mib": max(p["peak_kib"] for p in plain) / 1024,
                "traced_peak_mib": max(t["peak_kib"] for t in traced) / 1024,
                "loop_peak_mib": max(t["peak_kib"] for t in loop) / 1024,
            }
        )
    return rows


JUMP_APP = """
import sys
n = int(sys.argv[1])
total = 0
values = []
for i in range(n):
    total += i % 7
    if i % 1000 == 0:
        values.append(total)
answer = total * 2
print(answer)
"""


def _jump(session: Any, tag: int) -> float:
    """Best of three: describe the instruction at `tag` (one capture pass)."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        node = session.capture({tag})
        times.append(time.perf_counter() - start)
        assert tag in node
    return min(times)


def _workspace(prefix: str) -> tuple[Path, Path, Path, Path, Path]:
    """A temporary directory with a key pair and an empty app folder: (the directory, the
    public key, the identity, the app folder, the sealtrace command)."""
    from sealtrace.proxy import write_keypair

    work = Path(tempfile.mkdtemp(prefix=prefix))
    pub, key = write_keypair(work / "keys", "bench")
    app = work / "app"
    app.mkdir()
    return work, pub, key, app, Path(sys.executable).with_name("sealtrace")


def jumps(sizes: list[int]) -> list[dict[str, Any]]:
    from sealtrace.proxy import Identity
    from sealtrace.sandbox import CheckpointPolicy, Inquiry, load_recording
    from sealtrace.sandbox.questions import parse_at

    policy = CheckpointPolicy(interval=200_000, cap=128)
    rows = []
    work, pub, key, app, exe = _workspace("sealtrace-bench-")
    try:
        (app / "app.py").write_text(JUMP_APP)
        for target in sizes:
            loop = max(1, target // 11)  # about 11 instructions per iteration
            store = work / f"store-{target}"
            subprocess.run(
                [str(exe), "record", "--recipient", str(pub), "--output", str(store),
                 "--app-root", str(app), "--", sys.executable, str(app / "app.py"), str(loop)],
                check=True, capture_output=True, timeout=600,
            )  # fmt: skip
            data, parsed = load_recording(str(store), Identity.load(key))
            session = Inquiry(data, parsed)
            start = time.perf_counter()
            located = session.locate(parse_at("end"), "answer")
            locate_s = time.perf_counter() - start
            tag = int(located["value"]["tag"])
            plain = _jump(session, tag)
            with Inquiry(data, parsed, checkpoints=policy) as checkpointed:
                start = time.perf_counter()
                checkpointed.survey()  # the one run that takes the checkpoints
                setup_s = time.perf_counter() - start
                fast = _jump(checkpointed, tag)
                count = len(checkpointed._checkpointed().checkpoints)
            rows.append(
                {
                    "instructions": session.survey()["instructions"],
                    "jump_seconds_without_checkpoints": plain,
                    "jump_seconds_with_checkpoints": fast,
                    "checkpointing_run_seconds": setup_s,
                    "checkpoints": count,
                    "checkpoint_interval": policy.interval,
                    "locate_seconds": locate_s,
                }
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


# Two programs of about 17 instructions an iteration: in "accumulator" the value asked
# about is made from every iteration (its ancestry is the whole run, the worst case for the
# edges a serve pass keeps); in "independent" each iteration's value dies with it (the
# ancestry of what is live stays small, as in a server between requests).
QUESTIONS_APPS = {
    "accumulator": """
import sys
n = int(sys.argv[1])
prices = [round(1 + (i * 37 % 101) / 10, 2) for i in range(1000)]
total = 0
kept = []
for i in range(n):
    total += prices[i % 1000] * (i % 3)
    if i % 5000 == 0:
        kept.append(total)
answer = round(total / n, 4)
print(answer, len(kept))
""",
    "independent": """
import sys
n = int(sys.argv[1])
prices = [round(1 + (i * 37 % 101) / 10, 2) for i in range(1000)]
kept = []
for i in range(n):
    x = prices[i % 1000] * (i % 3)
    if i % 5000 == 0:
        kept.append(x)
answer = round(x / n, 4)
total = answer + 1
print(answer, len(kept))
""",
}


_ANSWER_LINE = {
    "accumulator": "answer = round(total / n, 4)",
    "independent": "answer = round(x / n, 4)",
}


def _trace_seconds(inquiry: Any, at: str, var: str) -> tuple[float, int]:
    """One trace (depth 64) and how many passes it took."""
    from sealtrace.sandbox.questions import Trace

    before = inquiry.passes
    start = time.perf_counter()
    inquiry.trace(Trace(at=at, var=var, depth=64))
    return time.perf_counter() - start, inquiry.passes - before


def _pss_mib(pids: list[int]) -> float:
    """The proportional set size of these processes together (shared pages split among
    them), as the sandbox runner's memory watch counts fork checkpoints."""
    total_kib = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Pss:"):
                        total_kib += int(line.split()[1])
        except OSError:
            continue
    return total_kib / 1024


def questions(sizes: list[int]) -> list[dict[str, Any]]:
    """A first answer and further ones, each side by side with the way before issue 24's
    one-pass work: in-process, `trace --at end` (a survey, then locate and slice in one
    pass, then a capture) against the same with a slice pass of its own, and as the CLI now
    asks it (`cli`: checkpoints and their edges taken by the first pass, within their time
    budget; `cli_every_interval`: one at every interval, the way before the budget); in a
    session (checkpoints every 250,000 instructions, within their budget), the open, the first
    question at the end and two more at the same stop, then one at a FILE:LINE asked twice,
    against a session whose serve pass
    keeps no edges, whose slices run from the start and whose capture is one pass, with the
    checkpoints' memory (PSS) once the session is open. The baseline is the program run plain
    (a fresh interpreter, its start included)."""
    from sealtrace.proxy import Identity
    from sealtrace.sandbox import CheckpointPolicy, Inquiry, load_recording

    class Before(Inquiry):
        """The way before: the locate slices nothing, the capture is one pass."""

        def locate(self, at: Any, expr: str | None = None, slice_depths: Any = ()) -> Any:
            return super().locate(at, expr)

        def capture(self, counters: set[int]) -> dict[int, dict[str, Any]]:
            wanted = {c for c in counters if c > 0 and c < (1 << 62)}
            if not wanted:
                return {}
            result = self.run({"kind": "capture", "counters": sorted(wanted)}, min(wanted))
            return {int(k): v for k, v in result["nodes"].items()}

        def stop_spec(self, at: Any) -> dict[str, Any]:
            self._located.clear()  # a line stop located again from the start every time
            return super().stop_spec(at)

    rows = []
    work, pub, key, app, exe = _workspace("sealtrace-bench-questions-")
    try:
        for (program, source), target in itertools.product(QUESTIONS_APPS.items(), sizes):
            (app / f"{program}.py").write_text(source)
            loop = max(1, target // 17)  # about 17 instructions per iteration
            command = [sys.executable, str(app / f"{program}.py"), str(loop)]
            plain = []
            for _ in range(3):
                start = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True, timeout=600)
                plain.append(time.perf_counter() - start)
            store = work / f"store-{program}-{target}"
            subprocess.run(
                [str(exe), "record", "--recipient", str(pub), "--output", str(store),
                 "--app-root", str(app), "--", *command],
                check=True, capture_output=True, timeout=600,
            )  # fmt: skip
            data, parsed = load_recording(str(store), Identity.load(key))
            row: dict[str, Any] = {"program": program, "plain_seconds": statistics.median(plain)}
            for name, kind in (("now", Inquiry), ("before", Before)):
                with kind(data, parsed) as inquiry:
                    seconds, passes = _trace_seconds(inquiry, "end", "answer")
                    row["instructions"] = inquiry.survey()["instructions"]
                row[f"in_process_first_{name}"] = {"seconds": seconds, "passes": passes}
                if name == "now":  # as the CLI asks in-process at `end`: with checkpoints
                    # (within their time budget; and, beside it, one at every interval)
                    for way, budget in (("cli", 0.1), ("cli_every_interval", 0.0)):
                        policy = CheckpointPolicy(budget=budget)
                        with Inquiry(data, parsed, checkpoints=policy) as inquiry:
                            seconds, passes = _trace_seconds(inquiry, "end", "answer")
                        row[f"in_process_first_{way}"] = {"seconds": seconds, "passes": passes}
                policy = CheckpointPolicy(edges=name == "now")
                with kind(data, parsed, checkpoints=policy) as session:
                    start = time.perf_counter()
                    session.survey()
                    opened = time.perf_counter() - start
                    pids = list(session._checkpointed().pids.values())
                    pss = _pss_mib(pids)
                    first = _trace_seconds(session, "end", "answer")
                    further = [_trace_seconds(session, "end", v) for v in ("total", "kept")]
                    # A FILE:LINE stop (the line that makes `answer`), asked twice.
                    number = source.splitlines().index(_ANSWER_LINE[program]) + 1
                    at_line = f"{program}.py:{number}"
                    line = [_trace_seconds(session, at_line, "kept") for _ in range(2)]
                row[f"session_{name}"] = {
                    "open_seconds": opened,
                    "checkpoints": len(pids),
                    "checkpoints_pss_mib": pss,
                    "first_seconds": first[0],
                    "first_passes": first[1],
                    "further_seconds": [f[0] for f in further],
                    "further_passes": [f[1] for f in further],
                    "line_seconds": [f[0] for f in line],
                    "line_passes": [f[1] for f in line],
                }
            rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


REPORT_APP = """\
\"\"\"Sales report: parse every order of a CSV export, keep them, total them by region.\"\"\"
import sys


def parse(path):
    orders = []
    with open(path) as f:
        f.readline()  # the header
        for line in f:
            order_id, region, qty, price = line.rstrip("\\n").split(",")
            orders.append(
                {"id": int(order_id), "region": region, "qty": int(qty), "price": float(price)}
            )
    return orders


def main():
    orders = parse(sys.argv[1])
    totals = {}
    for order in orders:
        amount = order["qty"] * order["price"]
        totals[order["region"]] = totals.get(order["region"], 0.0) + amount
    biggest = max(orders, key=lambda o: o["qty"] * o["price"])
    top = biggest["qty"] * biggest["price"]
    grand = sum(totals.values())
    print(f"{len(orders)} orders, {grand:.2f} in all; biggest {biggest['id']}: {top:.2f}")


main()
"""
# The question: where the biggest order's amount came from (both operands, to the CSV).
REPORT_VAR = "top"


class _PeakMemory:
    """The peak of the resident memory of a process and every process under it, summed,
    sampled from /proc while it runs; and the largest single process, from the kernel."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak_tree = 0
        self._stop = threading.Event()

    @staticmethod
    def _tree_rss(root: int) -> int:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        page = os.sysconf("SC_PAGE_SIZE")
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                statm = Path(f"/proc/{entry}/statm").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(statm.split()[1]) * page
        total, todo = 0, list(children.get(root, ()))  # not the measuring wrapper itself
        while todo:
            pid = todo.pop()
            total += rss.get(pid, 0)
            todo.extend(children.get(pid, ()))
        return total

    def run(self, cmd: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        sampler = threading.Thread(target=self._sample, args=(proc.pid,), daemon=True)
        sampler.start()
        out, err = proc.communicate(timeout=3600)
        seconds = time.perf_counter() - start
        self._stop.set()
        sampler.join()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err), seconds

    def _sample(self, pid: int) -> None:
        while not self._stop.is_set():
            self.peak_tree = max(self.peak_tree, self._tree_rss(pid))
            self._stop.wait(self.interval)


def _measured(cmd: list[str], cwd: Path) -> dict[str, Any]:
    """Run cmd in a fresh child whose RUSAGE_CHILDREN then holds the largest process it
    started (the kernel's figure), while the tree's summed RSS is sampled."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "rc = subprocess.run(sys.argv[1:]).returncode\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(peak, file=sys.stderr)\n"
        "sys.exit(rc)\n"
    )
    meter = _PeakMemory()
    done, seconds = meter.run([sys.executable, "-c", wrapper, *cmd], cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({done.returncode}): {done.stderr[-2000:]}")
    largest_kib = int(done.stderr.strip().splitlines()[-1])
    return {
        "seconds": seconds,
        "peak_mib": max(meter.peak_tree / 2**20, largest_kib / 1024),
        "largest_process_mib": largest_kib / 1024,
        "stdout": done.stdout,
    }


def _walk(node: dict[str, Any], out: list[dict[str, Any]]) -> None:
    out.append(node)
    for child in node["inputs"]:
        _walk(child, out)


def _origin(node: dict[str, Any]) -> str:
    """A leaf's origin; "cut" for a branch the answer did not follow to one."""
    return str((node.get("origin") or {}).get("kind") or "cut")


def report(rows: int) -> dict[str, Any]:
    """The report plain, then recorded and traced end to end by the CLI."""
    from sealtrace.proxy import write_keypair

    work = Path(tempfile.mkdtemp(prefix="sealtrace-bench-report-"))
    try:
        pub, key = write_keypair(work / "keys", "bench")
        app = work / "app"
        app.mkdir()
        (app / "report.py").write_text(REPORT_APP)
        line = 1 + REPORT_APP.splitlines().index(
            next(x for x in REPORT_APP.splitlines() if x.strip().startswith("print("))
        )
        rnd = random.Random(7)
        regions = ["north", "south", "east", "west", "central"]
        with open(work / "orders.csv", "w") as f:
            f.write("id,region,qty,price\n")
            for i in range(rows):
                f.write(f"{i},{rnd.choice(regions)},{rnd.randint(1, 20)},")
                f.write(f"{rnd.randint(100, 99_999) / 100}\n")
        python = sys.executable
        exe = str(Path(python).with_name("sealtrace"))
        plain = _measured([python, "app/report.py", "orders.csv"], work)
        record = _measured(
            [exe, "record", "--recipient", str(pub), "--output", "store", "--app-root", "app",
             "--", python, "app/report.py", "orders.csv"],
            work,
        )  # fmt: skip
        trace = _measured(
            [exe, "trace", "store", "--identity", str(key), "--at", f"report.py:{line}",
             "--var", REPORT_VAR, "--in-process", "--json"],
            work,
        )  # fmt: skip
        answer = json.loads(trace.pop("stdout"))
        nodes: list[dict[str, Any]] = []
        _walk(answer["root"], nodes)
        # A step reached several ways is expanded once and shown elsewhere without inputs.
        expanded = {n["counter"] for n in nodes if n["inputs"]}
        leaves = [n for n in nodes if not n["inputs"] and n["counter"] not in expanded]
        origins = sorted({_origin(leaf) for leaf in leaves})
        # Complete: nothing cut, every branch ends at a named origin, and one of them is a
        # recorded input (an event the replay served).
        reached = {
            int(n["origin"]["event"]): str(n["origin"].get("call"))
            for n in nodes
            if n.get("origin") and n["origin"].get("event") is not None
        }
        events = sorted(reached)
        complete = (
            not answer["query"]["truncated"]
            and not {"cut", "unknown"} & set(origins)
            and bool(events)
        )
        plain.pop("stdout")
        record.pop("stdout")
        return {
            "rows": rows,
            "question": f"trace --at report.py:{line} --var {REPORT_VAR} --in-process",
            "plain": plain,
            "record": record,
            "trace": trace,
            "trace_over_plain_peak": trace["peak_mib"] / plain["peak_mib"],
            "trace_over_plain_seconds": trace["seconds"] / plain["seconds"],
            "truncated": bool(answer["query"]["truncated"]),
            "passes": answer["query"].get("passes"),
            "complete": complete,
            "leaf_origins": origins,
            "leaves_without_origin": [
                f"{n['file']}:{n['line']} {n['op']}"
                for n in leaves
                if _origin(n) in ("cut", "unknown")
            ],
            "recorded_events_reached": [f"event {e}: {reached[e]}" for e in events],
            "root": {k: answer["root"][k] for k in ("file", "line", "function", "op")},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print_workloads(rows: list[dict[str, Any]]) -> None:
    head = f"{'workload':28} {'plain':>8} {'traced':>8} {'loop':>8} {'slowdown':>14}"
    print(f"{head} {'instr':>10} {'peak MiB plain → loop':>22}")
    for r in rows:
        print(
            f"{r['workload']:28} {r['plain_seconds']:8.4f} {r['traced_seconds']:8.4f} "
            f"{r['loop_seconds']:8.4f} {r['slowdown']:5.1f}x → {r['loop_slowdown']:4.1f}x "
            f"{r['instructions']:>10,} {r['plain_peak_mib']:10.1f} → {r['loop_peak_mib']:5.1f}"
        )
    if rows:
        traced = statistics.median(r["slowdown"] for r in rows)
        loop = statistics.median(r["loop_slowdown"] for r in rows)
        print(
            f"median slowdown: trace callback {traced:.1f}x, evaluation loop {loop:.1f}x "
            "(issue 24's target: ≤ 3x, no workload over 5x)"
        )


def main() -> None:
    quick = "--quick" in sys.argv
    report_only = "--report-only" in sys.argv
    if "--questions-only" in sys.argv:
        found = questions([1_000_000] if quick else [1_000_000, 10_000_000])
        print(json.dumps(found, indent=2))
        previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        previous.update(questions=found, questions_machine=machine())
        RESULTS.write_text(json.dumps(previous, indent=2) + "\n")
        return
    if "--workloads-only" in sys.argv:
        rows = workloads(1 if quick else REPEATS)
        _print_workloads(rows)
        previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        previous.update(
            workloads=rows,
            median_slowdown=statistics.median(r["slowdown"] for r in rows),
            median_loop_slowdown=statistics.median(r["loop_slowdown"] for r in rows),
            machine=machine(),
        )
        RESULTS.write_text(json.dumps(previous, indent=2) + "\n")
        return
    rows = [] if report_only else workloads(1 if quick else REPEATS)
    jump_rows = [] if report_only else jumps([1_000_000] if quick else [1_000_000, 10_000_000])
    question_rows = (
        [] if report_only else questions([1_000_000] if quick else [1_000_000, 10_000_000])
    )
    big = report(REPORT_ROWS // 10 if quick else REPORT_ROWS)
    median = statistics.median(r["slowdown"] for r in rows) if rows else 0.0
    _print_workloads(rows)
    for j in jump_rows:
        print(
            f"one jump at {j['instructions']:,} instructions: "
            f"{j['jump_seconds_without_checkpoints'] * 1000:.0f} ms without checkpoints, "
            f"{j['jump_seconds_with_checkpoints'] * 1000:.0f} ms with {j['checkpoints']} "
            f"(taken in one {j['checkpointing_run_seconds']:.2f} s run; target ≤ 100 ms at 10M)"
        )
    for q in question_rows:
        plain_s = q["plain_seconds"]
        print(
            f"questions, {q['program']}, at {q['instructions']:,} instructions (plain run "
            f"{plain_s:.2f} s):"
        )
        for name in ("now", "before"):
            first, session = q[f"in_process_first_{name}"], q[f"session_{name}"]
            further = ", ".join(f"{s:.2f} s" for s in session["further_seconds"])
            line = ", ".join(f"{s:.2f} s" for s in session.get("line_seconds", ()))
            print(
                f"  {name:6}: in-process first answer {first['seconds']:.2f} s "
                f"({first['seconds'] / plain_s:.1f}x plain, {first['passes']} passes); "
                f"session open {session['open_seconds']:.2f} s "
                f"({session['checkpoints']} checkpoints, {session['checkpoints_pss_mib']:.0f} "
                f"MiB), first "
                f"{session['first_seconds']:.2f} s, further {further}; at FILE:LINE {line}"
            )
        cli, every = q["in_process_first_cli"], q["in_process_first_cli_every_interval"]
        print(
            f"  cli   : in-process first answer {cli['seconds']:.2f} s (with checkpoints within "
            f"their time budget), {every['seconds']:.2f} s with one at every interval"
        )
    print(
        f"report, {big['rows']:,} orders kept alive: plain {big['plain']['seconds']:.1f} s "
        f"{big['plain']['peak_mib']:.0f} MiB; `sealtrace {big['question']}` "
        f"{big['trace']['seconds']:.1f} s {big['trace']['peak_mib']:.0f} MiB "
        f"({big['trace_over_plain_peak']:.2f}x the plain peak; target ≤ 3x); answer "
        f"{'complete' if big['complete'] else 'NOT complete'} (truncated: {big['truncated']}, "
        f"leaves: {', '.join(big['leaf_origins'])})"
    )
    if report_only and RESULTS.exists():
        previous = json.loads(RESULTS.read_text())
        previous.update(report=big, report_machine=machine())
        RESULTS.write_text(json.dumps(previous, indent=2) + "\n")
        return
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "repeats": 1 if quick else REPEATS,
                "workloads": rows,
                "median_slowdown": median,
                "median_loop_slowdown": (
                    statistics.median(r["loop_slowdown"] for r in rows) if rows else 0.0
                ),
                "jumps": jump_rows,
                "questions": question_rows,
                "report": big,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
