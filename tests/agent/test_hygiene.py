"""The processes that hold keys dump no core and cannot be read by another process of their
user: harden_process(), which `sealtrace agent` and `sealtrace server serve` call first."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import ctypes, resource
{call}
libc = ctypes.CDLL(None, use_errno=True)
print(libc.prctl(3, 0, 0, 0, 0), resource.getrlimit(resource.RLIMIT_CORE)[1])
"""  # 3 is PR_GET_DUMPABLE


def _probe(call: str) -> str:
    code = PROBE.format(call=call)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.split()  # type: ignore[return-value]  # fmt: skip


def test_a_hardened_process_is_not_dumpable_and_dumps_no_core() -> None:
    assert _probe("from sealtrace.agent import harden_process; harden_process()") == ["0", "0"]


def test_negative_control_an_ordinary_process_is_dumpable() -> None:
    dumpable, _core = _probe("")
    assert dumpable == "1"
