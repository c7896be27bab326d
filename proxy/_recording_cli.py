"""`sealtrace record`: start the target interpreter with the recorder installed first.

The child's exit status becomes ours (a child killed by signal N exits 128+N, as a shell
reports it). The parent does no recording itself; it checks what it can before starting the
program (the recipient, the output location, the command line) so that mistakes are usage
errors (exit 2) rather than a run recorded nowhere.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Sequence

from ._boot import BOOT_CODE
from ._errors import UsageError
from ._keys import Recipient
from ._launch import parse_command
from ._store import open_store

__all__ = ["run_recorded"]


def run_recorded(
    recipient: Recipient,
    output: str,
    command: Sequence[str],
    *,
    app_roots: Sequence[str] = (),
    env_allow: Sequence[str] = (),
    run_id: str | None = None,
) -> int:
    python, target = parse_command(list(command))
    if target.kind == "script" and not os.path.isfile(target.value):
        raise UsageError(f"can't open file {target.value!r}: no such file")
    store = open_store(output)
    if store.list().objects:
        raise UsageError(f"{store.location} already holds a recording; recordings are written once")
    roots = list(app_roots) or [
        os.path.dirname(os.path.realpath(target.value)) if target.kind == "script" else os.getcwd()
    ]
    for root in roots:
        if not os.path.isdir(root):
            raise UsageError(f"--app-root {root} is not a directory")
    env = dict(os.environ)
    seed = env.get("PYTHONHASHSEED")
    if seed is None or seed == "random":
        env["PYTHONHASHSEED"] = str(1 + secrets.randbelow(4294967295))
    config = {
        "recipient": recipient.to_text(),
        "store": output,
        "run_id": run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}",
        "app_roots": [os.path.abspath(r) for r in roots],
        "env_allow": list(env_allow),
        "target": target.as_dict(),
    }
    argv = [python, *target.python_options, "-c", BOOT_CODE, json.dumps(config)]
    try:
        child = subprocess.Popen(argv, env=env)
    except OSError as exc:
        raise UsageError(f"cannot start {python}: {exc.strerror}") from None
    # A terminal's ^C reaches the child directly; a SIGTERM or SIGHUP sent to us is passed on,
    # so the program (not this wrapper) decides how to end and the recording ends with it.
    forwarded = (signal.SIGTERM, signal.SIGHUP)
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for sig in forwarded:
        previous[sig] = signal.signal(sig, lambda number, _frame: child.send_signal(number))
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
