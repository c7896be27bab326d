"""A validation program run as a user would run it: recorded with the real CLI, its inputs
then deleted.

Both suites of `sealtrace validate` (the planted root causes and the ground-truth corpus)
start here. The program is copied into a scratch directory, its inputs are written beside
it, its peer (the other end of a socket, sealtrace.sandbox.validation.inputs) is started,
and `sealtrace record` runs it under a key pair made for this validation run. Then the
inputs are deleted: replay must not need them.

It must never leave a plaintext recording or a private key behind: both live only in the
scratch directory the caller owns and removes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sealtrace.proxy import Identity
from sealtrace.proxy.format import ParsedStream

from ._errors import ValidationError
from ._replay_process import load_recording
from .validation.inputs import PEER_TIMEOUT, Inputs

__all__ = ["RECORD_TIMEOUT", "ProgramRun", "parallel", "record_program", "sealtrace_command"]

RECORD_TIMEOUT = 120.0
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class ProgramRun:
    root: Path  # the program's directory, as recorded (trace answers name files under it)
    script: Path
    data: bytes
    parsed: ParsedStream


def record_program(
    source: Path,
    script: str,
    make_inputs: Callable[[Path], Inputs],
    work: Path,
    recipient: Path,
    identity: Identity,
) -> ProgramRun:
    program = work / "program"
    inputs_dir = work / "inputs"
    store = work / "recording"
    shutil.copytree(source, program)
    inputs_dir.mkdir()
    inputs = make_inputs(inputs_dir)
    failure: list[BaseException] = []
    peer = None
    if inputs.peer is not None:
        run_peer = inputs.peer

        def serve() -> None:
            try:
                run_peer()
            except BaseException as exc:  # reported after the recording, never lost
                failure.append(exc)

        peer = threading.Thread(target=serve, daemon=True)
        peer.start()
    proc = subprocess.run(
        [
            *sealtrace_command(),
            "record",
            "--recipient",
            str(recipient),
            "--output",
            str(store),
            "--app-root",
            str(program),
            "--",
            sys.executable,
            str(program / script),
            *inputs.args,
        ],
        cwd=inputs_dir,
        env={**os.environ, **inputs.env},
        capture_output=True,
        timeout=RECORD_TIMEOUT,
        check=False,
    )
    if peer is not None:
        peer.join(PEER_TIMEOUT)
    shutil.rmtree(inputs_dir)  # replay must not need them
    stderr = proc.stderr.decode("utf-8", "replace")
    if proc.returncode != 0 or "sealtrace:" in stderr:
        tail = stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise ValidationError(f"recording the program failed: {tail[0]}")
    if peer is not None and (peer.is_alive() or failure):
        problem = repr(failure[0]) if failure else "it did not finish"
        raise ValidationError(f"the program's peer failed: {problem}")
    data, parsed = load_recording(str(store), identity)
    return ProgramRun(program, program / script, data, parsed)


def sealtrace_command() -> list[str]:
    """The `sealtrace` console script next to this interpreter, as a user would run it."""
    script = Path(sys.executable).with_name("sealtrace")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "sealtrace.proxy.cli"]


def parallel(fn: Callable[[T], R], items: Sequence[T], jobs: int) -> list[R]:
    """`fn` over `items`, `jobs` at a time (0: one per CPU); the order is kept."""
    if not items:
        return []
    workers = max(1, min(len(items), jobs or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(fn, items))
