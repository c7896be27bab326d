"""The engine's tables by address and by key (`native/src/slots.hpp`: AddressTable, SlotMap)
agree with a reference map over millions of random insertions, lookups and erasures, holes
and compaction included: `cpp/address_table_check.cpp`, compiled here with the compiler that
builds the engine."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tables_agree_with_a_reference_map(tmp_path: Path) -> None:
    compiler = shutil.which("g++")
    assert compiler is not None, "g++ builds the engine; it must be here"
    binary = tmp_path / "address_table_check"
    subprocess.run(
        [
            compiler,
            "-std=c++20",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{ROOT / 'native' / 'src'}",
            str(ROOT / "tests" / "native" / "cpp" / "address_table_check.cpp"),
            str(ROOT / "native" / "src" / "slots.cpp"),
            "-o",
            str(binary),
        ],
        check=True,
        timeout=300,
    )
    out = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
