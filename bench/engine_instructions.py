"""The provenance engine's cost in instructions: steady, where time is not.

bench/engine.py times each workload plain and under the engine; on a shared virtual machine
those times move by tens of percent from one run to the next (the workloads take 3-100 ms),
so a change of a few percent to the engine cannot be seen in them. Instruction counts can.
This script runs bench/engine.py's workloads under valgrind's callgrind, in fresh processes
(the same child program, hash seed 0), for:

- **plain**: CPython alone;
- **loop**: with the engine attached, in its own evaluation loop (what replay uses).

A figure is the instructions of the whole process running the workload less those of the
same process running `pass` in the same mode (start-up, imports and the engine's attach
cancel out), so the ratio loop / plain is the engine's cost per unit of the program's own
work, counted. It leaves out what time sees and counting does not (cache misses, branch
mispredictions): it is the steady half of the picture, not a replacement for the timings.
Needs valgrind.

    python bench/engine_instructions.py [--json PATH]

Prints a table and writes bench/results/engine_instructions.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from _machine import machine
from engine import CHILD, WORKLOADS

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engine_instructions.json"
MODES = ("plain", "loop")


def _instructions(mode: str, source: str) -> int:
    """Instructions callgrind counted in a fresh process running `source` in `mode`."""
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            CHILD,
            mode,
            textwrap.dedent(source),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"callgrind gave no count for {mode}: {out.stderr[-500:]}")
    return int(found.group(1))


def measure() -> dict[str, Any]:
    empty = {mode: _instructions(mode, "pass") for mode in MODES}
    rows = []
    for name, source in WORKLOADS.items():
        counts = {mode: _instructions(mode, source) - empty[mode] for mode in MODES}
        rows.append(
            {
                "workload": name,
                "plain_instructions": counts["plain"],
                "loop_instructions": counts["loop"],
                "loop_ratio": counts["loop"] / counts["plain"],
            }
        )
    return {
        "machine": machine(),
        "empty_instructions": empty,
        "workloads": rows,
        "median_loop_ratio": statistics.median(r["loop_ratio"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("engine_instructions: needs valgrind (apt-get install valgrind)")
    result = measure()
    print(f"{'workload':<30} {'plain':>15} {'loop':>15} {'ratio':>7}")
    for r in result["workloads"]:
        print(
            f"{r['workload']:<30} {r['plain_instructions']:>15,} "
            f"{r['loop_instructions']:>15,} {r['loop_ratio']:>6.2f}x"
        )
    print(f"median: {result['median_loop_ratio']:.2f}x the plain run's instructions")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
