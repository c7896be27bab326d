"""Recording a process: what the recording says about the run, and the recorder's lifecycle.

`Recording` ties the pieces together: it describes the run (META), streams events through a
pipeline thread that hashes, seals and stores them (_pipeline.py), records the source of every
module imported from the application roots, installs the boundary, and finishes with the exit
status. It must never crash or block the application: any failure to set up, seal or store is
reported once on stderr and the application runs on unrecorded.

`start_recording()` is the embedding API: call it first thing in the main script (or from
sitecustomize) and the rest of the process is recorded; when the same script is replayed,
the call does nothing.
"""

from __future__ import annotations

import atexit
import fnmatch
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import re
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._boundary import Patcher, install, libraries
from ._codec import blob_digest
from ._format import DEFAULT_CHUNK_SIZE
from ._io_boundary import describe_stdio, tracked_descriptors
from ._keys import Recipient
from ._launch import Target
from ._pipeline import StreamPipeline
from ._rotation import NextRun, NumberedRuns
from ._runtime import (
    OWN_DIRECTORIES,
    RecordRuntime,
    _report_stderr,
    given_and_resolved,
    interpreter_trees,
    path_under,
    record_runtime,
)
from ._store import RecordingSink, open_store
from ._stream import META, SOURCE
from ._thread_boundary import outside_the_program
from ._writer import SealedWriter

__all__ = [
    "DEFAULT_ENV_ALLOW",
    "Recording",
    "ReplayHooks",
    "describe_run",
    "forget_distribution_lookups",
    "installed_manifest",
    "passthrough_prefixes",
    "replay_hooks",
    "start_recording",
]

DEFAULT_ENV_ALLOW = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "PWD",
    "SHELL",
    "USER",
    "LOGNAME",
    "TMPDIR",
    "PYTHON*",
)
REPLAYING = False  # set by the replaying process: start_recording() is then a no-op
_SEGMENT_SIZE = 1024 * 1024
_getpid = os.getpid  # captured: the recorder's own calls are never recorded
_spec_from_file_location = importlib.util.spec_from_file_location
_open_code = io.open_code


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_manifest() -> list[list[str]]:
    """[name, version] of every installed distribution, sealtrace itself excluded."""
    from importlib.metadata import distributions

    found: dict[str, str] = {}
    for dist in distributions():
        metadata = dist.metadata  # parsed once: name and version both come from it
        name = metadata["Name"]
        if name and _canonical(name) != "sealtrace":
            found.setdefault(_canonical(name), metadata["Version"])
    return [[name, found[name]] for name in sorted(found)]


def passthrough_prefixes() -> list[str]:
    """The interpreter's own trees: files there come with the replay image, not the recording."""
    return given_and_resolved(OWN_DIRECTORIES, interpreter_trees())


def forget_distribution_lookups() -> None:
    """Drop what importlib.metadata remembers of sys.path's directories.

    Describing the run (the manifest, the boundary plugins' entry points) lists every
    directory on sys.path before the boundary is installed, and importlib.metadata keeps
    each listing keyed by the directory's mtime. A program's later lookup (werkzeug asks
    for its own version) would then stat each directory through the boundary and use the
    listing only if the mtime matched. The replaying process made its listings on another
    file system (a container image), so the same recorded mtime would miss there and list
    the directory: a call the recording does not have. Forgotten on both sides, the
    program's first lookup stats and lists through the boundary, and replay serves both.
    """
    from importlib.metadata import FastPath  # type: ignore[attr-defined]

    FastPath.__new__.cache_clear()


class ReplayHooks:
    """What a replaying process may touch in the recorder, and nothing more: the REPLAYING
    switch (start_recording() is then a no-op) and the passthrough prefixes, whose computation
    warms the same sysconfig and site caches the recorder warmed before installing the
    boundary. Exported as `replay_hooks` by sealtrace.proxy.boundary."""

    # Named as the module global it stands for, so `hooks.REPLAYING = True` reads as before.
    @property
    def REPLAYING(self) -> bool:
        return REPLAYING

    @REPLAYING.setter
    def REPLAYING(self, value: bool) -> None:
        global REPLAYING
        REPLAYING = value

    @staticmethod
    def passthrough_prefixes() -> list[str]:
        return passthrough_prefixes()

    @staticmethod
    def forget_distribution_lookups() -> None:
        forget_distribution_lookups()


replay_hooks = ReplayHooks()


def _allowed(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _zone_name() -> str | None:
    if os.environ.get("TZ"):
        return os.environ["TZ"]
    try:
        link = os.readlink("/etc/localtime")
    except OSError:
        return None
    marker = "zoneinfo/"
    return link.split(marker, 1)[1] if marker in link else None


def describe_run(
    target: Target,
    *,
    run_id: str,
    app_roots: Sequence[str],
    env_allow: Sequence[str],
    hash_seed: str | None,
    libs: Sequence[str],
) -> dict[str, Any]:
    env = dict(os.environ)
    allow = [*DEFAULT_ENV_ALLOW, *env_allow]
    return {
        "run_id": run_id,
        "python": sys.version,
        "executable": sys.executable,
        "target": target.as_dict(),
        "flags": {
            k: getattr(sys.flags, k)
            for k in dir(sys.flags)
            if not k.startswith(("_", "n_"))
            and isinstance(getattr(sys.flags, k), int)
            and k not in ("count", "index")
        },
        # Set from the locale at start-up: replay needs the same (the locale's data present).
        "filesystem_encoding": sys.getfilesystemencoding(),
        "cwd": os.getcwd(),
        "hash_seed": hash_seed,
        "env": {k: v for k, v in env.items() if _allowed(k, allow)},
        "env_names": list(env),
        "env_allow": allow,
        "path": list(sys.path),
        "app_roots": [os.path.abspath(r) for r in app_roots],
        "passthrough": passthrough_prefixes(),
        "manifest": installed_manifest(),
        # The program starts with no directory listing cached (forget_distribution_lookups):
        # replay forgets its own before running it. Absent from older recordings.
        "cold_lookups": True,
        # Every thread's calls are recorded, and the locks and queues that order them (sync
        # events, _thread_boundary). Absent from older recordings, which stopped at a thread.
        "threads": True,
        # Another thread's call_soon_threadsafe reaches the event loop at its read of its
        # self-pipe, an event (_thread_boundary._patch_event_loop). Absent from older ones.
        "handoffs": True,
        "stdio": describe_stdio(),
        "libraries": list(libs),
        "timezone": {
            "zone": _zone_name(),
            "tzname": list(time.tzname),
            "timezone": time.timezone,
            "altzone": time.altzone,
        },
        "started": time.time(),
    }


class SourceRecorder(importlib.abc.MetaPathFinder):
    """Records the source of every module imported from the application roots, and runs
    exactly the bytes it recorded."""

    def __init__(self, recording: Recording) -> None:
        self._rec = recording

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None
        if not self._rec.is_app_file(spec.origin, spec.submodule_search_locations):
            return spec
        if spec.origin and spec.origin.endswith(".py"):
            spec.loader = RecordingLoader(fullname, spec.origin, self._rec)
        elif spec.origin is None and spec.submodule_search_locations:
            self._rec.record_source(
                fullname, next(iter(spec.submodule_search_locations)) + os.sep, True, b""
            )
        else:
            self._rec.note("native-module", f"{fullname} from {spec.origin} is not Python source")
        return spec


def recording_file_specs(recording: Recording) -> Callable[..., Any]:
    """importlib.util.spec_from_file_location, for a recording: a module loaded from an
    application file by its path (gunicorn's --config file, a plugin loaded by path) gets a
    RecordingLoader, so its source is recorded as an import's is, and replay runs those
    bytes (sealtrace.sandbox's replay serves them by path), never the file on disk."""
    base = _spec_from_file_location

    def spec_from_file_location(name: str, location: Any = None, *args: Any, **kwargs: Any) -> Any:
        spec = base(name, location, *args, **kwargs)
        origin = getattr(spec, "origin", None)
        if (
            spec is not None
            and kwargs.get("loader") is None
            and not args
            and isinstance(origin, str)
            and origin.endswith(".py")
            and recording.is_app_file(origin, None)
        ):
            spec.loader = RecordingLoader(name, origin, recording)
        return spec

    return spec_from_file_location


def recording_open_code(recording: Recording) -> Callable[[Any], Any]:
    """io.open_code, for a recording: an application file read as code by its path (runpy's
    run_path: how a multiprocessing spawn child runs its parent's main module) has its bytes
    recorded as a source, and the program gets exactly those (replay serves them by path)."""
    base = _open_code

    def open_code(path: Any) -> Any:
        if isinstance(path, str) and path.endswith(".py") and recording.is_app_file(path, None):
            with base(path) as f:
                source = f.read()
            name = os.path.abspath(path)
            recording.record_source(f"<code:{name}>", name, False, source)
            return io.BytesIO(source)
        return base(path)

    return open_code


class RecordingLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, recording: Recording) -> None:
        super().__init__(fullname, path)
        self._rec = recording

    def get_code(self, fullname: str) -> Any:
        source = self.get_data(self.path)
        self._rec.record_source(fullname, self.path, self.is_package(fullname), source)
        return self.source_to_code(source, self.path)


class Recording:
    """One recorded run of this process, from start() until finish() or interpreter exit."""

    def __init__(
        self,
        recipient: Recipient,
        sink: RecordingSink,
        target: Target,
        *,
        run_id: str | None = None,
        app_roots: Sequence[str] = (),
        env_allow: Sequence[str] = (),
        sink_timeout: float = 60.0,
        rotate_requests: int | None = None,
        rotate_bytes: int | None = None,
        next_run: NextRun | None = None,
        parent: dict[str, Any] | None = None,
    ) -> None:
        """`rotate_requests`/`rotate_bytes`: rotate the run once its request index holds that
        many requests, or its stream that many bytes (_rotated), to the runs `next_run` names
        (by default the first run's id and location numbered on: _rotation.py)."""
        self.run_id = run_id or f"run-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
        self.runs = [self.run_id]  # this one, then each it rotated to
        self._run_starts = [0]  # requests recorded when each began
        self._rotate = (rotate_requests, rotate_bytes)
        self._retired: list[StreamPipeline] = []
        self._next_run = next_run or NumberedRuns(recipient)
        self._parent = parent  # a child's run: the run (process, event) that started it
        self.target = target
        self._recipient = recipient
        self._sink = sink
        self._app_roots = [os.path.abspath(r) for r in app_roots]
        self._env_allow = list(env_allow)
        self._sink_timeout = sink_timeout
        self._pipeline: StreamPipeline | None = None
        self.runtime: RecordRuntime | None = None
        self._patcher: Patcher | None = None
        self._passthrough: list[str] = []
        self._finished = False
        self.main_source: bytes | None = None
        self._preloaded: set[str] = set(sys.modules)
        self._pid = _getpid()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> bool:
        """Install the recorder; False (reported once) if recording could not start."""
        try:
            libs = libraries()
            meta = describe_run(
                self.target,
                run_id=self.run_id,
                app_roots=self._app_roots,
                env_allow=self._env_allow,
                hash_seed=os.environ.get("PYTHONHASHSEED"),
                libs=[lib.name for lib in libs],
            )
            if self._parent is not None:
                meta["parent"] = self._parent
            inherited = _inherited_descriptors()
            if inherited:
                meta["descriptors"] = inherited
            self._passthrough = meta["passthrough"]
            pipeline = self._pipeline = StreamPipeline(self._sink)
            pipeline.attach(
                SealedWriter(
                    pipeline,
                    self._recipient,
                    self.run_id,
                    chunk_size=DEFAULT_CHUNK_SIZE,
                    segment_size=_SEGMENT_SIZE,
                )
            )
            rt = self.runtime = record_runtime(pipeline)
            tracked_descriptors(rt).update(meta.get("descriptors", ()))
            rt.finish_recording = self.finish
            rt.forked = self._forked
            rt.python_child = self._child_command  # type: ignore[attr-defined]
            if any(limit is not None for limit in self._rotate):
                rt.rotate_requests, rt.rotate_bytes = self._rotate
                rt.rotation = self._rotated
            rt.env_allowed, rt.env_names = meta["env"], meta["env_names"]  # type: ignore[attr-defined]
            rt.stdio = meta["stdio"]  # type: ignore[attr-defined]
            rt.passthrough_prefixes = tuple(self._passthrough)  # type: ignore[attr-defined]
            rt.record_value(META, meta)
            if meta["hash_seed"] in (None, "random") and self._parent is not None:
                # (a child's stderr is its own output: said in the recording, not there)
                rt.note("hash-seed", "PYTHONHASHSEED is not set: set ordering may differ")
            elif meta["hash_seed"] in (None, "random"):
                _report_stderr(
                    "PYTHONHASHSEED is not set: set ordering may differ on replay "
                    "(`sealtrace record` sets it for you)"
                )
            if self.target.kind == "script":
                with open(self.target.value, "rb") as f:
                    self.main_source = f.read()
                # Under the name its code has (absolute), as every other source.
                name = self.target.file or self.target.value
                self.record_source("__main__", name, False, self.main_source)
            for name, module in list(sys.modules.items()):
                origin = getattr(module, "__file__", None)
                if (
                    name != "__main__"
                    and origin
                    and origin.endswith(".py")
                    and self.is_app_file(origin, None)
                ):
                    with open(origin, "rb") as f:
                        self.record_source(name, origin, hasattr(module, "__path__"), f.read())
            sys.meta_path.insert(0, SourceRecorder(self))
            importlib.util.spec_from_file_location = recording_file_specs(self)
            io.open_code = recording_open_code(self)  # type: ignore[assignment]
            forget_distribution_lookups()
            self._patcher = install(rt, libs)
            if self._parent is not None:
                rt.store_now()  # a child its parent may kill (a pool's worker) leaves this
            # The recorder's own objects are long-lived: keep them out of every collection.
            gc.freeze()
        except Exception as exc:
            _report_stderr(
                f"recording did not start: {exc.__class__.__name__}: {exc}; "
                "the application runs unrecorded"
            )
            if self.runtime is not None:
                self.runtime.fail("could not install the boundary")
            self._uninstall()
            return False
        return True

    def finish(self, status: int | None, exception: str | None = None) -> str:
        """Seal the end of the recording and wait for the store; returns the outcome."""
        if self._finished or self.runtime is None or _getpid() != self._pid:
            return "not recording"  # (a child forked but not recorded holds a copy)
        self._finished = True
        rt = self.runtime
        native = _native_modules(self._preloaded)
        if native:
            rt.note(
                "native-modules",
                "extension modules loaded by the application (their own "
                f"I/O is behind the boundary): {', '.join(native)}",
            )
        rt.finish(status, exception)
        self._uninstall()
        for pipeline in [*self._retired, self._pipeline]:
            error = pipeline.close(self._sink_timeout) if pipeline is not None else None
            if error is not None and rt.outcome == "complete":
                rt.outcome = f"failed: {error}"
                _report_stderr(f"recording failed: {error}")
        return rt.outcome or "complete"

    @property
    def process(self) -> str:
        """This process's path in the recording: "" the recorded process, "1" its first
        forked child, ... (_stream.py's FORK)."""
        return self.runtime.process if self.runtime is not None else ""

    def _forked(self, path: str) -> StreamPipeline:
        """In a child the program forked (an at-fork handler, the GIL held, the only thread):
        the child's own stream, sealed under its own body key into the same store, through a
        pipeline thread of its own. The parent's pipeline is not this process's: its copy is
        dropped, never closed."""
        parent = self._pipeline
        if parent is None or parent.writer is None:
            raise ValueError("the recording has no stream to fork")
        # The recorder's own objects: real queues and locks, no events, no object ids.
        with outside_the_program():
            reopen = getattr(self._sink, "for_forked_process", None)
            sink = reopen() if reopen is not None else self._sink
            pipeline = StreamPipeline(sink)
            pipeline.attach(SealedWriter.for_process(parent.writer, pipeline, path))  # type: ignore[arg-type]
        self._pipeline = pipeline
        self._sink = sink
        self._pid = _getpid()
        self.runs, self._retired = [self.run_id], []
        self._run_starts = [self.runtime.requests_recorded if self.runtime is not None else 0]
        self._next_run = self._next_run.forked()
        return pipeline

    def _rotated(self) -> tuple[StreamPipeline, dict[str, Any], str] | None:
        """The run this one rotates to (RecordRuntime.rotation; the records held): a new
        recording beside this one, sealed to the recipient `next_run` gives under a key of its
        own, whose `continues` object carries this run's key. None if no run is ready yet
        (a lease still to come): the run goes on."""
        pipeline, sink = self._pipeline, self._sink
        writer = pipeline.writer if pipeline is not None else None
        beside, name = getattr(sink, "beside", None), getattr(sink, "name", None)
        if not isinstance(writer, SealedWriter) or beside is None or not isinstance(name, str):
            raise ValueError(f"{sink.location} cannot hold a run beside it")
        following_run = self._next_run(self.run_id, name, self.process)
        if following_run is None:
            return None
        run_id, recipient, location = following_run
        # (Calls are closed on this thread, so what it makes here is real and recorded
        # nowhere; not outside_the_program(), which would hide the other threads' events.)
        following = beside(location)
        if getattr(following, "path", None) is not None and following.list().objects:
            raise ValueError(f"{following.location} already holds a recording")
        previous = writer.continuation(name)
        try:
            new = StreamPipeline(following)
            new.attach(
                SealedWriter(
                    new,
                    recipient,
                    run_id,
                    chunk_size=DEFAULT_CHUNK_SIZE,
                    segment_size=_SEGMENT_SIZE,
                    previous=previous,
                )
            )
        finally:
            previous.key.wipe()
        continues = {
            "run": run_id,
            "previous": self.run_id,
            "process": self.process,
            "header": writer.header_digest,
        }
        # The old pipeline retires once the runtime has ended its stream (it still holds
        # buffers being sealed); those finished without an error are let go.
        self._retired = [p for p in self._retired if not p.finished() or p.error is not None]
        assert pipeline is not None
        self._retired.append(pipeline)
        self._pipeline, self._sink, self.run_id = new, following, run_id
        self.runs.append(run_id)
        if self.runtime is not None:
            self._run_starts.append(self.runtime.requests_recorded)
        return new, continues, location

    def _child_command(self, args: Any, executables: Any, rest: tuple[Any, ...]) -> Any:
        """The command line a child this interpreter runs as Python is started with instead
        of `args` (fork_exec's), so that it records itself as a run of its own, linked to this
        one (its META's `parent`), beside this run in the store, under the next run the
        source gives (`NextRun.child`); None to start it as it is (not this interpreter, not
        a program `sealtrace record` could record, no run ready: said in a NOTE). Runs on
        the program's thread inside the start (calls closed: nothing here is recorded)."""
        from ._boot import boot_command  # (the boot imports this module)
        from ._launch import parse_command

        rt, sink = self.runtime, self._sink
        beside, name = getattr(sink, "beside", None), getattr(sink, "name", None)
        if rt is None or not rt.active or beside is None or not isinstance(name, str):
            return None
        try:
            argv = [os.fsdecode(a) for a in args]
            program = os.fsdecode(executables[0])
            if os.path.realpath(program) != os.path.realpath(sys.executable) or not argv:
                return None
            python, target = parse_command(argv)
        except Exception:  # (not a Python command line sealtrace records: started as is)
            return None
        made = self._next_run.child(self.run_id, name, self.process)
        if made is None:
            rt.note("child-process", f"a Python child ({target.value}) is not recorded: no run")
            return None
        run_id, recipient, location = made
        cwd = os.fsdecode(rest[2]) if len(rest) > 2 and rest[2] is not None else os.getcwd()
        if target.kind == "script" and not os.path.isabs(target.value):
            target.file = os.path.join(cwd, target.value)
        rotate_requests, rotate_bytes = self._rotate
        config = {
            "recipient": recipient.to_text(),
            "store": beside(location).location,
            "run_id": run_id,
            "app_roots": self._app_roots,
            "env_allow": self._env_allow,
            "target": target.as_dict(),
            "rotate_requests": rotate_requests,
            "rotate_bytes": rotate_bytes,
            "lease_fifo": getattr(self._next_run, "path", None),  # (LeasedRuns': the feed)
            "parent": {"run": self.run_id, "process": self.process, "event": rt.events},
        }
        return boot_command(python, target, config)

    def run_requests(self) -> list[tuple[str, int]]:
        """Each run of this process's line and how many requests its index recorded."""
        total = self.runtime.requests_recorded if self.runtime is not None else 0
        ends = [*self._run_starts[1:], total]
        return [
            (run, end - start)
            for run, start, end in zip(self.runs, self._run_starts, ends, strict=True)
        ]

    def _uninstall(self) -> None:
        if self._patcher is not None:
            self._patcher.restore()
            self._patcher = None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, SourceRecorder)]
        importlib.util.spec_from_file_location = _spec_from_file_location
        io.open_code = _open_code

    # -- used by the import hook -------------------------------------------------------------

    def is_app_file(self, origin: str | None, locations: Any) -> bool:
        path = origin or (next(iter(locations)) if locations else None)
        if not path:
            return False
        path = os.path.abspath(path)
        return path_under(path, self._app_roots) and not path_under(path, self._passthrough)

    def record_source(self, module: str, path: str, is_package: bool, source: bytes) -> None:
        rt = self.runtime
        if rt is None or not rt.active:
            return
        digest = blob_digest(source)
        rt._blob(digest, source)
        rt.record_value(SOURCE, (module, path, is_package, digest))

    def note(self, what: str, detail: str) -> None:
        if self.runtime is not None:
            self.runtime.note(what, detail)


def _inherited_descriptors() -> list[int]:
    """The descriptors beyond stdio this process was started with (before the boundary is
    installed, and before the recorder opens any): what another process handed it (a spawned
    child's pipes from its parent: multiprocessing names them on its command line). They are
    inputs from outside, tracked like descriptors that came through the boundary."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    found = []
    for name in names:
        if name.isdigit() and int(name) > 2:
            try:
                os.fstat(int(name))  # (the listing's own descriptor is closed by now)
            except OSError:
                continue
            found.append(int(name))
    return sorted(found)


def _native_modules(preloaded: set[str]) -> list[str]:
    stdlib = os.path.dirname(os.__file__)
    names = []
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if name not in preloaded and origin.endswith(".so") and not origin.startswith(stdlib):
            names.append(name)
    return sorted(names)


def start_recording(
    recipient: Recipient | str,
    store: str | RecordingSink,
    *,
    run_id: str | None = None,
    app_roots: Sequence[str] | None = None,
    env_allow: Sequence[str] = (),
    rotate_requests: int | None = None,
    rotate_bytes: int | None = None,
) -> Recording | None:
    """Record the rest of this process (embedding API). Call it before importing the
    application; it finishes at interpreter exit. Returns None when replaying (the call is
    then a no-op) or when recording could not start (reported once on stderr). With
    `rotate_requests` or `rotate_bytes` the run rotates to a new one (beside it in the store)
    after that many requests or stream bytes (docs/replay.md, *Rotation*)."""
    if REPLAYING:
        return None
    try:
        key = recipient if isinstance(recipient, Recipient) else Recipient.load(Path(recipient))
        sink = open_store(store) if isinstance(store, str) else store
        target = _current_target()
    except Exception as exc:
        _report_stderr(f"recording did not start: {exc}; the application runs unrecorded")
        return None
    roots = list(app_roots) if app_roots is not None else [_default_root(target)]
    recording = Recording(key, sink, target, run_id=run_id, app_roots=roots, env_allow=env_allow,
                          rotate_requests=rotate_requests, rotate_bytes=rotate_bytes)  # fmt: skip
    if not recording.start():
        return None
    atexit.register(recording.finish, None)
    return recording


def _current_target() -> Target:
    from ._launch import parse_command

    _, target = parse_command(list(sys.orig_argv))
    target.embedded = True
    return target


def _default_root(target: Target) -> str:
    if target.kind == "script":
        return os.path.dirname(os.path.realpath(target.value))
    return os.getcwd()
