"""Issue 21, finding 4: the program `sealtrace record --server` records never sees the record
token, by any path (proxy/_record_token.py).

The recorded program here is hostile: it starts a searcher that looks for the token in the
environment and command line of every ancestor, in its own environment and memory, in the
files behind every descriptor it and the recorder hold, in the recorder's memory, and in
every file of the user's cache and home (the lease pool). Root can read the recorder's
memory, where the token lives (docs/platform.md says so), so the scenario also runs as an
unprivileged user (65534, with Debian's python3.11 and this tree's site-packages), where the
recorder's environ, mem, maps and fd table must be refused outright. Negative controls show
that the searcher finds a token that is there, and the command-line and ancestor paths are
refused with one line and exit 2 before the program runs. The recorder's own hardening
leaves the program's core limit as it was.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles
from .conftest import SEALTRACE, RecordServer

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3.11"
_MASK = 0x5A  # the searcher is told the token masked, so its own argv does not hold it

# Run as a child of the recorded program (an unrecorded plain interpreter): prints what it
# searched, where it was refused, and where it found the token.
SEARCH = r"""
import json, os, sys

needle = bytes(b ^ 0x5A for b in bytes.fromhex(sys.argv[1]))
report = {"found": [], "denied": [], "searched": [], "pids": {}}


def look(where, data):
    report["searched"].append(where)
    if needle in data:
        report["found"].append(where)


def read(where, path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        report["denied"].append(f"{where}: {exc.strerror}")
        return None
    look(where, data)
    return data


def memory(where, pid):
    maps = read(f"{where} maps", f"/proc/{pid}/maps")
    if maps is None:
        read(f"{where} mem", f"/proc/{pid}/mem")  # refused too, or the maps would be readable
        return
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps.decode().splitlines():
            span, perms = line.split()[:2]
            low, high = (int(x, 16) for x in span.split("-"))
            if perms[0] != "r" or line.endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            for at in range(low, high, 1 << 24):
                try:
                    chunk = os.pread(mem.fileno(), min(1 << 24, high - at) + len(needle), at)
                except OSError:
                    continue
                if needle in chunk and f"{where} mem" not in report["found"]:
                    report["found"].append(f"{where} mem")
        report["searched"].append(f"{where} mem")


def descriptors(where, pid):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as exc:
        report["denied"].append(f"{where} fd: {exc.strerror}")
        return
    report["searched"].append(f"{where} fd")
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(path)
        except OSError:
            continue
        look(f"{where} fd {fd} -> {target}", target.encode())
        if target.startswith("/") and os.path.isfile(path):
            read(f"{where} fd {fd} ({target})", path)


def parent(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rpartition(b")")[2].split()[1])


program = os.getppid()
recorder = parent(program)
report["pids"] = {"program": program, "recorder": recorder}
read("own environ", "/proc/self/environ")
look("own os.environ", repr(dict(os.environ)).encode())
look("own argv", repr(sys.argv).encode())
memory("program", program)
descriptors("program", program)
descriptors("recorder", recorder)
if os.geteuid() != 0:  # root reads the recorder's memory, by design (docs/platform.md)
    memory("recorder", recorder)
pid = program
while pid > 0:
    read(f"ancestor {pid} environ", f"/proc/{pid}/environ")
    read(f"ancestor {pid} cmdline", f"/proc/{pid}/cmdline")
    pid = parent(pid)
for top in sys.argv[2:]:
    for base, _dirs, files in os.walk(top):
        for name in files:
            read(f"file {os.path.join(base, name)}", os.path.join(base, name))
print(json.dumps(report))
"""

# The recorded program: notes the descriptors it started with, then runs the searcher.
PROGRAM = """
import json, os, subprocess, sys

at_start = {{}}
for fd in os.listdir("/proc/self/fd"):
    try:
        at_start[int(fd)] = os.readlink(f"/proc/self/fd/{{fd}}")
    except OSError:
        pass  # the directory listdir read, closed again
search = subprocess.run([sys.executable, {search!r}, {masked!r}, *{roots!r}],
                        capture_output=True, check=False)
sys.stderr.write(search.stderr.decode())
print(json.dumps({{"at_start": at_start, "search": json.loads(search.stdout)}}))
"""


def masked(token: str) -> str:
    return bytes(b ^ _MASK for b in token.encode()).hex()


@dataclass
class Scene:
    """A directory the unprivileged user can use: its home and cache (the lease pool), the
    store, the programs, and a sitecustomize that makes this tree importable for Debian's
    python3.11 (the virtualenv's interpreter is under /root, out of that user's reach)."""

    root: Path
    home: Path
    cache: Path
    store: Path
    site: Path

    def program(self, token: str) -> Path:
        search = self.root / "search.py"
        search.write_text(SEARCH)
        app = self.root / "app.py"
        roots = [str(self.home), str(self.cache)]
        app.write_text(PROGRAM.format(search=str(search), masked=masked(token), roots=roots))
        return app

    def env(self, **extra: str) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "XDG_CACHE_HOME": str(self.cache),
                "PYTHONPATH": str(self.site), "LANG": "C.UTF-8", **extra}  # fmt: skip


@pytest.fixture
def scene() -> Iterator[Scene]:
    root = Path(tempfile.mkdtemp(prefix="sealtrace-token-"))
    os.chmod(root, 0o711)  # noqa: S103 - the unprivileged user passes through, lists nothing
    paths = [root / name for name in ("home", "cache", "store", "site")]
    for path in paths:
        path.mkdir()
        os.chown(path, NOBODY, NOBODY)
    site_packages = sysconfig.get_path("purelib")
    # Ahead of Debian's own packages (its cryptography is older than ours).
    (root / "site" / "sitecustomize.py").write_text(
        f"import site, sys\nbefore = list(sys.path)\nsite.addsitedir({site_packages!r})\n"
        "sys.path[:] = [p for p in sys.path if p not in before] + before\n"
    )
    try:
        yield Scene(root, *paths)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def as_nobody(*argv: str) -> list[str]:
    return ["setpriv", "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", *argv]


def recorder(python: str) -> list[str]:
    """`sealtrace record` run by `python` (the console script's own interpreter, or Debian's)."""
    if python == sys.executable:
        return [SEALTRACE, "record"]
    return [python, "-c", "from sealtrace.proxy.cli import main; main()", "record"]


def sealtrace_lines(stderr: bytes) -> list[bytes]:
    return [line for line in stderr.splitlines() if b"sealtrace" in line]


def searched(
    proc: subprocess.CompletedProcess[bytes],
) -> tuple[dict[int, str], dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    return {int(fd): target for fd, target in out["at_start"].items()}, out["search"]


def _inherited_stdio_only(at_start: dict[int, str], scene: Scene) -> None:
    """Beyond stdio, the program started with only what the recorder inside it had opened by
    then (its own run's directory in the store): nothing from the recorder outside it."""
    assert sorted(at_start)[:3] == [0, 1, 2], at_start
    others = [target for fd, target in at_start.items() if fd > 2]
    assert all(target.startswith(f"{scene.store}/run-") for target in others), at_start


def _assert_nowhere(report: dict[str, Any], token: str, *also: Path) -> None:
    assert report["found"] == [], report["found"]
    places = " ".join(report["searched"])
    for needed in ("own environ", "program mem", "program fd", "ancestor 1 cmdline", "leases-"):
        assert needed in places, f"the search never reached {needed}: {report}"
    for path in also:  # the store, as root sees it afterwards
        for file in path.rglob("*"):
            assert not file.is_file() or token.encode() not in file.read_bytes(), file


def _record(
    server: RecordServer, scene: Scene, python: str, *, prefix: list[str], **env: str
) -> subprocess.CompletedProcess[bytes]:
    app = scene.program(server.record_token)
    argv = [*prefix, *recorder(python), "--server", server.url, "--store", str(scene.store),
            "--", python, str(app)]  # fmt: skip
    return subprocess.run(argv, env=scene.env(**env), cwd=scene.root, capture_output=True,
                          timeout=120, check=False)  # fmt: skip


@pytest.mark.integration
def test_the_recorded_program_finds_the_token_nowhere(
    record_server: RecordServer, scene: Scene
) -> None:
    proc = _record(record_server, scene, sys.executable, prefix=[],
                   SEALTRACE_TOKEN=record_server.record_token)  # fmt: skip
    at_start, report = searched(proc)
    assert sealtrace_lines(proc.stderr) == [], proc.stderr
    _inherited_stdio_only(at_start, scene)
    _assert_nowhere(report, record_server.record_token, scene.store)
    run_dir = next(scene.store.iterdir())
    assert record_server.run(run_dir.name)["status"] == "complete"


@pytest.mark.integration
def test_as_an_unprivileged_user_the_recorder_is_closed_to_its_program(
    record_server: RecordServer, scene: Scene
) -> None:
    proc = _record(record_server, scene, SYSTEM_PYTHON, prefix=as_nobody(),
                   SEALTRACE_TOKEN=record_server.record_token)  # fmt: skip
    at_start, report = searched(proc)
    _inherited_stdio_only(at_start, scene)
    _assert_nowhere(report, record_server.record_token, scene.store)
    # Not found, because not readable: the recorder's files in /proc belong to root.
    denied = " ".join(report["denied"])
    recorder_pid = report["pids"]["recorder"]
    for refused in ("recorder fd", "recorder maps", "recorder mem", f"{recorder_pid} environ"):
        assert refused in denied, report
    run_dir = next(scene.store.iterdir())
    assert record_server.run(run_dir.name)["status"] == "complete"


@pytest.mark.integration
def test_the_token_on_a_descriptor_from_a_root_only_file(
    record_server: RecordServer, scene: Scene
) -> None:
    secret = scene.root / "token"
    secret.write_text(record_server.record_token + "\n")
    os.chmod(secret, 0o400)
    fd = os.open(secret, os.O_RDONLY)
    try:
        app = scene.program(record_server.record_token)
        argv = [*as_nobody(*recorder(SYSTEM_PYTHON)), "--server", record_server.url, "--store",
                str(scene.store), "--token-fd", str(fd), "--", SYSTEM_PYTHON, str(app)]  # fmt: skip
        proc = subprocess.run(argv, env=scene.env(), cwd=scene.root, capture_output=True,
                              pass_fds=(fd,), timeout=120, check=False)  # fmt: skip
    finally:
        os.close(fd)
    at_start, report = searched(proc)
    _inherited_stdio_only(at_start, scene)
    _assert_nowhere(report, record_server.record_token, scene.store)
    run_dir = next(scene.store.iterdir())
    assert record_server.run(run_dir.name)["status"] == "complete"


@pytest.mark.integration
def test_a_token_file_the_user_can_read_is_refused(
    record_server: RecordServer, scene: Scene
) -> None:
    secret = scene.home / "token"
    secret.write_text(record_server.record_token + "\n")
    os.chown(secret, NOBODY, NOBODY)
    os.chmod(secret, 0o400)  # its owner can still read it (and so can the program)
    marker = scene.root / "ran"
    fd = os.open(secret, os.O_RDONLY)
    try:
        argv = [*as_nobody(*recorder(SYSTEM_PYTHON)), "--server", record_server.url, "--store",
                str(scene.store), "--token-fd", str(fd), "--", SYSTEM_PYTHON, "-c",
                f"open({str(marker)!r}, 'w')"]  # fmt: skip
        proc = subprocess.run(argv, env=scene.env(), cwd=scene.root, capture_output=True,
                              pass_fds=(fd,), timeout=120, check=False)  # fmt: skip
    finally:
        os.close(fd)
    _one_refusal(proc, b"can be opened by this user", record_server.record_token)
    assert not marker.exists()


def _one_refusal(proc: subprocess.CompletedProcess[bytes], needle: bytes, token: str) -> None:
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert needle.decode() in lines[0] and token not in lines[0], lines[0]
    assert proc.stdout == b""


@pytest.mark.integration
def test_a_token_on_the_command_line_is_refused(
    record_server: RecordServer, scene: Scene, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    for given in (["--token", record_server.record_token],
                  [f"--token={record_server.record_token}"]):  # fmt: skip
        proc = subprocess.run(
            [SEALTRACE, "record", "--server", record_server.url, "--store", str(tmp_path),
             *given, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
            env={**os.environ, "XDG_CACHE_HOME": str(scene.cache)}, capture_output=True,
            timeout=120, check=False,
        )  # fmt: skip
        _one_refusal(proc, b"SEALTRACE_TOKEN", record_server.record_token)
        assert b"/proc/PID/cmdline" in proc.stderr
        assert not marker.exists()


def _through_shell(
    server: RecordServer, scene: Scene, shell_line: str, env: dict[str, str], marker: Path
) -> subprocess.CompletedProcess[bytes]:
    record = (f"{SEALTRACE} record --server {server.url} --store {scene.store} -- "
              f"{sys.executable} -c \"open('{marker}', 'w')\"")  # fmt: skip
    return subprocess.run(["/bin/sh", "-c", shell_line.format(record=record)],
                          env={**os.environ, "XDG_CACHE_HOME": str(scene.cache), **env},
                          capture_output=True, timeout=120, check=False)  # fmt: skip


# `; exit $?`: the shell runs on after the recorder (no exec), as a wrapper script would.
@pytest.mark.integration
@pytest.mark.parametrize(
    ("shell_line", "env", "needle"),
    [
        # The shell was started with the token in its environment.
        ("{record}; exit $?", ["SEALTRACE_TOKEN"], b"in the environment of process"),
        # The shell's command line names the token.
        ("SEALTRACE_TOKEN={token} {record}; exit $?", [], b"in the command line of process"),
        # The program would inherit the token under another name.
        ("exec {record}", ["SEALTRACE_TOKEN", "COPY"], b"in the environment variable COPY"),
    ],
    ids=["ancestor-environment", "ancestor-command-line", "another-variable"],
)
def test_a_token_the_program_could_still_read_is_refused(
    record_server: RecordServer,
    scene: Scene,
    tmp_path: Path,
    shell_line: str,
    env: list[str],
    needle: bytes,
) -> None:
    token, marker = record_server.record_token, tmp_path / "ran"
    given = dict.fromkeys(env, token)
    line = shell_line.replace("{token}", token)
    proc = _through_shell(record_server, scene, line, given, marker)
    _one_refusal(proc, needle, token)
    assert not marker.exists()
    # Control: the same, started with exec and the token in SEALTRACE_TOKEN only, records.
    ok = _through_shell(record_server, scene, "exec {record}", {"SEALTRACE_TOKEN": token}, marker)
    assert ok.returncode == 0 and sealtrace_lines(ok.stderr) == [], ok.stderr
    assert marker.exists()


@pytest.mark.integration
def test_the_search_finds_a_token_that_is_there(record_server: RecordServer, scene: Scene) -> None:
    """Negative control: a plain parent (no recorder) that holds the token in its environment
    and memory, as the unprivileged user: the searcher finds it in both."""
    token = record_server.record_token
    search = scene.root / "search.py"
    search.write_text(SEARCH)
    holder = textwrap.dedent(f"""
        import os, subprocess, sys
        held = os.environ["SEALTRACE_TOKEN"]
        child = subprocess.run([sys.executable, "-c", "import subprocess, sys; "
                                "sys.stdout.write(subprocess.run([sys.executable, "
                                "{str(search)!r}, {masked(token)!r}], capture_output=True)"
                                ".stdout.decode())"], env={{}}, capture_output=True)
        print(child.stdout.decode())
    """)
    proc = subprocess.run(as_nobody(SYSTEM_PYTHON, "-c", holder), cwd=scene.root,
                          env=scene.env(SEALTRACE_TOKEN=token), capture_output=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    found = json.loads(proc.stdout)["found"]
    assert any(f.endswith(" environ") and f.startswith("ancestor") for f in found), found
    assert "recorder mem" in found, found  # the searcher's grandparent: here, the holder


def test_the_program_keeps_its_own_core_limit(keys: KeyFiles, tmp_path: Path) -> None:
    """The recorder lowers its own core limit to 0; the program gets the one it was started
    with, as if it ran without the recorder."""
    show = "import resource; print(resource.getrlimit(resource.RLIMIT_CORE))"
    given = (12345 * 4096, resource.RLIM_INFINITY)
    outputs = []
    for recorded in (False, True):
        prefix = [SEALTRACE, "record", "--recipient", str(keys.recipient_path), "--output",
                  str(tmp_path / "rec"), "--"] if recorded else []  # fmt: skip
        proc = subprocess.run([*prefix, sys.executable, "-c", show], capture_output=True,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, given),
                              timeout=120, check=False)  # fmt: skip
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] == f"{given}\n".encode()
