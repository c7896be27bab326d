"""Provenance engine cost: replay with the engine attached against plain CPython, and the
latency of one provenance jump deep into a run.

    .venv/bin/python bench/engine.py [--quick]

Workloads run in fresh processes, plain and traced, interleaved, REPEATS times each; a run
counts its own wall time around the workload (not interpreter start) and its peak RSS. The
slowdown of a workload is the median over repeats of traced/plain. A jump is one capture
pass: re-executing a recorded run to an instruction near its end and describing it, at 1M
and 10M instructions. Prints a table and writes bench/results/engine.json.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _machine import machine

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engine.json"
REPEATS = 5

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
}

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    mode, source = sys.argv[1], sys.argv[2]
    code = compile(source, "<workload>", "exec")
    engine = None
    if mode == "traced":
        from sealtrace._engine import Engine
        engine = Engine(lambda filename: False)
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
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def workloads(repeats: int) -> list[dict[str, Any]]:
    rows = []
    for name, source in WORKLOADS.items():
        plain, traced = [], []
        for _ in range(repeats):
            plain.append(_run("plain", source))
            traced.append(_run("traced", source))
        ratios = [t["seconds"] / p["seconds"] for p, t in zip(plain, traced, strict=True)]
        rows.append(
            {
                "workload": name,
                "plain_seconds": statistics.median(p["seconds"] for p in plain),
                "traced_seconds": statistics.median(t["seconds"] for t in traced),
                "slowdown": statistics.median(ratios),
                "instructions": traced[0]["instructions"],
                "plain_peak_mib": max(p["peak_kib"] for p in plain) / 1024,
                "traced_peak_mib": max(t["peak_kib"] for t in traced) / 1024,
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


def jumps(sizes: list[int]) -> list[dict[str, Any]]:
    from sealtrace.proxy import Identity, write_keypair
    from sealtrace.sandbox import CheckpointPolicy, Inquiry, load_recording
    from sealtrace.sandbox.questions import parse_at

    policy = CheckpointPolicy(interval=200_000, cap=128)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="sealtrace-bench-"))
    try:
        pub, key = write_keypair(work / "keys", "bench")
        app = work / "app"
        app.mkdir()
        (app / "app.py").write_text(JUMP_APP)
        exe = Path(sys.executable).with_name("sealtrace")
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


def main() -> None:
    quick = "--quick" in sys.argv
    rows = workloads(1 if quick else REPEATS)
    jump_rows = jumps([1_000_000] if quick else [1_000_000, 10_000_000])
    median = statistics.median(r["slowdown"] for r in rows)
    head = f"{'workload':28} {'plain':>9} {'traced':>9} {'slowdown':>9} {'instr':>10}"
    print(f"{head} {'peak MiB':>15}")
    for r in rows:
        print(
            f"{r['workload']:28} {r['plain_seconds']:9.4f} {r['traced_seconds']:9.4f} "
            f"{r['slowdown']:8.1f}x {r['instructions']:>10,} "
            f"{r['plain_peak_mib']:6.1f} → {r['traced_peak_mib']:5.1f}"
        )
    print(f"median slowdown: {median:.1f}x (target ≤ 10x)")
    for j in jump_rows:
        print(
            f"one jump at {j['instructions']:,} instructions: "
            f"{j['jump_seconds_without_checkpoints'] * 1000:.0f} ms without checkpoints, "
            f"{j['jump_seconds_with_checkpoints'] * 1000:.0f} ms with {j['checkpoints']} "
            f"(taken in one {j['checkpointing_run_seconds']:.2f} s run; target ≤ 100 ms at 10M)"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "repeats": 1 if quick else REPEATS,
                "workloads": rows,
                "median_slowdown": median,
                "jumps": jump_rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
