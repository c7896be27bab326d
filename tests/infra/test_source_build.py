"""Building sealtrace from source on a machine without a compiler fails with one line that
says what to install, not CMake's page of diagnostics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO


@pytest.mark.slow
def test_no_compiler_is_named_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "CC": str(tmp_path / "no-cc"), "CXX": str(tmp_path / "no-c++")}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path / "dist"), str(REPO),
         "--config-settings=build-dir=" + str(tmp_path / "build")],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0
    said = " ".join((proc.stdout + proc.stderr).split())
    assert "sealtrace: building from source needs a C and C++ compiler" in said, said[-3000:]
    assert not list((tmp_path / "dist").glob("*.whl"))
