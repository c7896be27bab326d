"""What to run and how: the target of a recording, started the way `python` itself would.

Recording and replay both run the target through run_target(), so the program sees the same
sys.argv, sys.path[0], __main__ module, exit status and traceback either way. The source of a
script target comes from the caller (read from disk when recording, from the recording when
replaying), never from run_target itself.
"""

from __future__ import annotations

import atexit
import builtins
import importlib.machinery
import itertools
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import UsageError
from ._runtime import is_own_code

__all__ = ["Target", "exit_status", "parse_command", "run_target"]

# Options that take a separate argument, and options that cannot be recorded faithfully.
_WITH_ARGUMENT = {"-W", "-X", "--check-hash-based-pycs"}
_REFUSED = {
    "-E": "-E ignores PYTHONHASHSEED, so the hash seed cannot be fixed and recorded",
    "-I": "-I ignores PYTHONHASHSEED, so the hash seed cannot be fixed and recorded",
    "-i": "interactive sessions cannot be recorded",
    "-": "a program read from stdin cannot be recorded (save it to a file)",
}


@dataclass
class Target:
    kind: str  # "script" | "module" | "code"
    value: str
    args: list[str] = field(default_factory=list)
    python_options: list[str] = field(default_factory=list)
    # Embedded: the recording began inside the running program (start_recording), after the
    # interpreter had set sys.path itself; replay then keeps the recorded sys.path as it is.
    embedded: bool = False
    # A script as the interpreter names it in __file__ and its code: absolute, the working
    # directory joined to a relative path and not normalised ("./app.py" is "/srv/./app.py").
    # None in recordings made before it was kept: the path as given.
    file: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "value": self.value,
            "args": list(self.args),
            "python_options": list(self.python_options),
            "embedded": self.embedded,
            **({"file": self.file} if self.file is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Target:
        return cls(
            data["kind"],
            data["value"],
            list(data["args"]),
            list(data["python_options"]),
            bool(data.get("embedded", False)),
            data.get("file"),
        )


def parse_command(command: list[str]) -> tuple[str, Target]:
    """Split `PYTHON [options] (script | -m module | -c code) [args...]`."""
    if not command:
        raise UsageError("nothing to record: give the command after --, e.g. -- python3 app.py")
    python, rest = command[0], command[1:]
    options: list[str] = []
    i = 0
    while i < len(rest):
        token = rest[i]
        if token in ("-m", "-c"):
            if i + 1 >= len(rest):
                raise UsageError(f"{token} needs an argument")
            kind = "module" if token == "-m" else "code"  # noqa: S105 - not a secret
            return python, Target(kind, rest[i + 1], rest[i + 2 :], options)
        if token in _REFUSED or (
            token.startswith("-")
            and not token.startswith("--")
            and any(f"-{c}" in _REFUSED for c in token[1:])
        ):
            flag = (
                token
                if token in _REFUSED
                else next(f"-{c}" for c in token[1:] if f"-{c}" in _REFUSED)
            )
            raise UsageError(f"cannot record with {flag}: {_REFUSED[flag]}")
        if token == "--":  # noqa: S105 - an option marker, not a secret
            i += 1
            break
        if not token.startswith("-"):
            break
        if token[1:2] in ("m", "c") and len(token) > 2 and not token.startswith("--"):
            raise UsageError(f"write {token[:2]} and its argument as separate words")
        options.append(token)
        if token in _WITH_ARGUMENT:
            if i + 1 >= len(rest):
                raise UsageError(f"{token} needs an argument")
            options.append(rest[i + 1])
            i += 1
        i += 1
    if i >= len(rest):
        raise UsageError("no program to record: give a script, -m module or -c code")
    script = rest[i]
    file = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    return python, Target("script", script, rest[i + 1 :], options, file=file)


def exit_status(code: Any) -> tuple[int, str | None]:
    """SystemExit's code as the interpreter turns it into an exit status."""
    if code is None:
        return 0, None
    if isinstance(code, int):  # bool too: SystemExit(True) exits 1 and prints nothing
        return int(code) & 0xFF, None
    return 1, str(code)


def _trim_traceback(exc: BaseException, seen: set[int] | None = None) -> None:
    """Take sealtrace's frames out of an exception's traceback (the launcher's above the
    program, the boundary's below a call that raised: a broken pipe at a print), and out of
    the exceptions it was raised from or during: the program's own printout is as it would
    be unrecorded."""
    seen = set() if seen is None else seen
    if id(exc) in seen:
        return
    seen.add(id(exc))
    kept = []
    tb = exc.__traceback__
    while tb is not None:
        if not is_own_code(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    for outer, inner in itertools.pairwise(kept):
        outer.tb_next = inner
    if kept:
        kept[-1].tb_next = None
    exc.__traceback__ = kept[0] if kept else None
    for linked in (exc.__cause__, exc.__context__):
        if linked is not None:
            _trim_traceback(linked, seen)


def run_target(
    target: Target,
    script_source: Callable[[str], bytes] | None = None,
    on_start: Callable[[], None] | None = None,
    on_uncaught: Callable[[BaseException], None] | None = None,
) -> tuple[int, str | None]:
    """Run the target as `python` would; returns (exit status, uncaught exception or None).

    on_start runs once sys.argv is the program's, just before its first instruction;
    on_uncaught with the exception (SystemExit too) that ended it, before it is printed."""
    # __main__ as the interpreter makes it (Python/pylifecycle.c, add_main_module): empty
    # annotations, the builtins module, and a loader: the built-in importer for -c, a source
    # file loader for a script.
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __annotations__={},
        __builtins__=builtins,
        __loader__=importlib.machinery.BuiltinImporter,
    )
    sys.modules["__main__"] = main
    keep_path = bool(getattr(sys.flags, "safe_path", False)) or target.embedded
    uncaught: str | None = None
    try:
        try:
            if target.kind == "script":
                assert script_source is not None
                sys.argv = [target.value, *target.args]
                if not keep_path:
                    sys.path[0] = os.path.dirname(os.path.realpath(target.value))
                source = script_source(target.value)
                filename = target.file or target.value
                main.__file__ = filename
                main.__cached__ = None  # type: ignore[attr-defined]
                main.__loader__ = importlib.machinery.SourceFileLoader("__main__", filename)
                code = compile(source, filename, "exec", dont_inherit=True)
                if on_start is not None:
                    on_start()
                exec(code, main.__dict__)  # noqa: S102 - running the program is the point
            elif target.kind == "module":
                import runpy

                sys.argv = ["-m", *target.args]
                if not keep_path:
                    sys.path[0] = os.getcwd()
                if on_start is not None:
                    on_start()
                runpy._run_module_as_main(target.value, alter_argv=True)  # type: ignore[attr-defined]
            else:
                sys.argv = ["-c", *target.args]
                if not keep_path:
                    sys.path[0] = ""
                code = compile(target.value, "<string>", "exec", dont_inherit=True)
                if on_start is not None:
                    on_start()
                exec(code, main.__dict__)  # noqa: S102
            status = 0
        except SystemExit as exc:
            if on_uncaught is not None:
                on_uncaught(exc)
            status, message = exit_status(exc.code)
            if message is not None:
                print(message, file=sys.stderr)
        except BaseException as exc:
            _trim_traceback(exc)
            uncaught = f"{type(exc).__module__}.{type(exc).__qualname__}"
            if on_uncaught is not None:
                on_uncaught(exc)
            status = 130 if isinstance(exc, KeyboardInterrupt) else 1
            if sys.excepthook is sys.__excepthook__:
                # The interpreter's own hook reads the source through the file descriptor
                # in C, behind the boundary; the traceback module prints the same text
                # through open(), which the boundary serves.
                import traceback

                traceback.print_exception(exc, file=sys.stderr)
            else:
                sys.excepthook(type(exc), exc, exc.__traceback__)
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
    return status, uncaught
