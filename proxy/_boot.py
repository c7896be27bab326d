"""Entry point inside the recorded interpreter (`sealtrace record` starts it with -c).

It must leave the application's behaviour alone: the recorder is installed before any
application import, the target runs exactly as `python` would run it, and the process exits
with the application's own status whether or not recording succeeded.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

from ._keys import Recipient
from ._launch import Target, run_target
from ._recorder import Recording
from ._rotation import LeasedRuns
from ._runtime import _report_stderr
from ._store import open_store

__all__ = ["BOOT_CODE", "boot_command", "main"]

BOOT_CODE = (
    "import sys\n"
    "try:\n"
    "    from sealtrace.proxy._boot import main\n"
    "except ImportError as exc:\n"
    "    sys.stderr.write(f'sealtrace: error: this interpreter cannot import sealtrace '\n"
    "                     f'({exc})\\n')\n"
    "    raise SystemExit(2)\n"
    "main()\n"
)


def boot_command(python: str, target: Target, config: dict[str, Any]) -> list[str]:
    """The command line that starts `python` with the recorder installed first, recording
    `target` as `config` says (what main() reads): `sealtrace record`'s program, and a Python
    child the recorded program starts."""
    return [python, *target.python_options, "-c", BOOT_CODE, json.dumps(config)]


class Summary:
    """What the recorder tells the `sealtrace record` that started it when the run ends (the
    request index's size, for the server): written to a FIFO that parent made in a directory
    of its own and holds open for reading. The FIFO is opened only then, so the program never
    inherits a descriptor of it; its path is in the recorder's command line, where the program
    could find it and write too (the count is for orientation: docs/platform.md)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def write(self, fields: dict[str, Any]) -> None:
        if self.path is None:
            return
        try:
            # Non-blocking: with no reader (the parent gone) this fails instead of waiting.
            fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, json.dumps(fields).encode()[:4096])
        except OSError:
            pass
        finally:
            os.close(fd)


def main() -> None:
    config = json.loads(sys.argv[1])
    summary = Summary(config.get("summary_fifo"))
    target = Target.from_dict(config["target"])
    recording: Recording | None = None
    try:
        sink = open_store(config["store"])
        recording = Recording(
            Recipient.from_text(config["recipient"]),
            sink,
            target,
            run_id=config["run_id"],
            app_roots=config["app_roots"],
            env_allow=config["env_allow"],
            rotate_requests=config.get("rotate_requests"),
            rotate_bytes=config.get("rotate_bytes"),
            next_run=LeasedRuns(config["lease_fifo"]) if config.get("lease_fifo") else None,
            parent=config.get("parent"),
        )
    except Exception as exc:
        _report_stderr(f"recording did not start: {exc}; the application runs unrecorded")
    if recording is not None and not recording.start():
        recording = None

    def script_source(path: str) -> bytes:
        if recording is not None and recording.main_source is not None:
            return recording.main_source
        with open(path, "rb") as f:
            return f.read()

    status, uncaught = run_target(target, script_source)
    if recording is not None:
        outcome = recording.finish(status, uncaught)
        if outcome != "not recording" and recording.runtime is not None and not recording.process:
            # The latest runs' counts only: the summary is one small write (4 KiB).
            summary.write({"requests": recording.runtime.requests_recorded,
                           "runs": recording.run_requests()[-32:]})  # fmt: skip
    raise SystemExit(status)
