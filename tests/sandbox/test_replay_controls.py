"""Negative controls and the replay contract: what must be refused, detected, or kept exact.

- reading the clock behind the boundary (ctypes) is caught at the output it changes (exit 3);
- id()-dependent output is caught the same way;
- a changed source tree on disk does not change what replays (recorded sources are used);
- a corrupt event stream and a wrong key are integrity failures (exit 4);
- a run that forks a pseudo-terminal stops recording cleanly, and replay says where (exit 3);
- another Python version or distribution manifest is refused (exit 2);
- replay needs no network: it passes inside a fresh network namespace;
- the program's own stdout, stderr and exit status pass through recording unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sealtrace.proxy import Recipient
from sealtrace.proxy._codec import decode_value, encode_value
from sealtrace.proxy._stream import META

from ..conftest import KeyFiles, run_cli, seal_cli
from .replaying import (
    PYTHON,
    assert_bit_exact,
    rebuilt_stream,
    record,
    replay,
    stream_records,
    trace_json,
    walk,
    write_app,
)

pytestmark = pytest.mark.integration


def _plaintext(keys: KeyFiles, location: Path) -> bytes:
    proc = run_cli("open", str(location), "--identity", str(keys.identity_path))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _reseal(keys: KeyFiles, location: Path, plaintext: bytes, run_id: str) -> None:
    seal_cli(keys, str(location), plaintext, run_id=run_id)


def _run_id(keys: KeyFiles, location: Path) -> str:
    meta = stream_records(_plaintext(keys, location))[0]
    assert meta[0] == META
    return str(decode_value(meta[1])["run_id"])


def test_clock_read_through_ctypes_diverges_at_its_output(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(
        tmp_path / "app",
        """
        import ctypes, time
        libc = ctypes.CDLL(None)
        print("recorded clock", time.time_ns())
        print("behind the boundary", libc.clock())
        """,
    )
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert rec.proc.returncode == 0
    proc, receipt = replay(keys, tmp_path / "rec")
    assert proc.returncode == 3, proc.stderr
    assert receipt is not None and receipt["status"] == "diverged"
    div = receipt["divergence"]
    assert div["expected"].startswith("stdout.write")
    assert div["app_location"] == f"{app}:5"
    assert div["expected_bytes"] != div["actual_bytes"]
    assert any(n["what"] == "ctypes" for n in receipt["notes"])
    message = proc.stderr.decode()
    assert message.count("sealtrace: error:") == 1 and f"{app}:5" in message


def test_id_dependent_output_diverges(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(tmp_path / "app", "print('id', id(object()) ^ id([]))\n")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    proc, receipt = replay(keys, tmp_path / "rec")
    assert proc.returncode == 3 and receipt is not None
    assert receipt["divergence"]["expected"].startswith("stdout.write")


def test_replay_uses_recorded_sources_not_the_tree_on_disk(tmp_path: Path, keys: KeyFiles) -> None:
    tree = tmp_path / "app"
    write_app(tree, "VALUE = 'recorded helper'\n", "helper.py")
    write_app(tree / "pkg", "NAME = 'recorded package'\n", "__init__.py")
    app = write_app(tree, "import helper, pkg\nprint(helper.VALUE, pkg.NAME)\n")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    # The tree changes after the run: new code in every file, and a module shadowing a
    # stdlib name that replay must not pick up.
    write_app(tree, "VALUE = 'CHANGED helper'\n", "helper.py")
    write_app(tree / "pkg", "NAME = 'CHANGED package'\n", "__init__.py")
    write_app(tree, "import helper, pkg\nprint('CHANGED main', helper.VALUE, pkg.NAME)\n")
    assert_bit_exact(*replay(keys, tmp_path / "rec"))
    # Control: the change is visible to a fresh recording, so the test could fail.
    fresh = record(keys, tmp_path / "rec2", [PYTHON, str(app)])
    assert b"CHANGED" in fresh.proc.stdout


def test_a_module_loaded_by_its_path_replays_its_recorded_source(
    tmp_path: Path, keys: KeyFiles
) -> None:
    # gunicorn's --config file, a plugin: importlib.util.spec_from_file_location, then
    # exec_module. Its source is recorded as an import's, and replay runs it, not the file
    # on disk (gone here).
    tree = tmp_path / "app"
    plugin = write_app(tree, "RATE = 7\n", "plugin_conf.py")
    source = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('__conf__', sys.argv[1])\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print('rate', module.RATE)\n"
    )
    app = write_app(tree, source)
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app), str(plugin)])
    assert rec.proc.returncode == 0 and rec.proc.stdout == b"rate 7\n", rec.proc.stderr
    plugin.unlink()
    assert_bit_exact(*replay(keys, tmp_path / "rec"))
    # Control: without the recorded source the file is gone, and a fresh run fails on it.
    fresh = record(keys, tmp_path / "rec2", [PYTHON, str(app), str(plugin)])
    assert fresh.proc.returncode != 0


def test_import_of_a_module_never_recorded_is_refused(tmp_path: Path, keys: KeyFiles) -> None:
    tree = tmp_path / "app"
    app = write_app(tree, "import sys\nif len(sys.argv) > 5:\n    import extra\nprint('ok')\n")
    write_app(tree, "print('extra ran')\n", "extra.py")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    assert_bit_exact(*replay(keys, tmp_path / "rec"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_corrupt_event_stream_is_an_integrity_failure(
    tmp_path: Path, keys: KeyFiles, damage: str
) -> None:
    app = write_app(tmp_path / "app", "import time\nprint(time.time())\n")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    plaintext = bytearray(_plaintext(keys, tmp_path / "rec"))
    if damage == "flip":
        plaintext[len(plaintext) // 2] ^= 0x40
    elif damage == "truncate":
        del plaintext[-7:]
    else:
        plaintext += b"\x05\xff\xff\xff"
    _reseal(keys, tmp_path / "bad", bytes(plaintext), "run-bad")
    proc, _ = replay(keys, tmp_path / "bad")
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.decode().count("sealtrace: error:") == 1
    assert b"Traceback" not in proc.stderr


def test_wrong_key_is_refused(tmp_path: Path, keys: KeyFiles, other_keys: KeyFiles) -> None:
    app = write_app(tmp_path / "app", "print('secret')\n")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    proc, _ = replay(other_keys, tmp_path / "rec")
    assert proc.returncode == 4
    assert b"secret" not in proc.stdout + proc.stderr


CONCURRENT = {
    # Forks are recorded (tests/sandbox/test_forks.py); a pseudo-terminal's is not.
    "forkpty": (
        "import os, pty\npid, fd = pty.fork()\nif pid == 0: os._exit(0)\nos.waitpid(pid, 0)",
        b"the application called os.forkpty()",
    ),
}


@pytest.mark.parametrize("kind", sorted(CONCURRENT))
def test_concurrency_stops_recording_and_replay_says_where(
    tmp_path: Path, keys: KeyFiles, kind: str
) -> None:
    code, reason = CONCURRENT[kind]
    lines = ["import time", "print('before', time.time() > 0)", *code.split("\n")]
    app = write_app(tmp_path / "app", "\n".join([*lines, "print('after', time.time() > 0)", ""]))
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert rec.proc.returncode == 0
    assert rec.proc.stdout.startswith(b"before True\n")
    assert rec.proc.stdout.endswith(b"after True\n")
    assert rec.proc.stderr.count(b"sealtrace: recording stopped: " + reason) == 1, rec.proc.stderr
    proc, receipt = replay(keys, tmp_path / "rec")
    assert proc.returncode == 3 and receipt is not None
    assert receipt["status"] == "stopped"
    assert receipt["events_replayed"] == receipt["events_recorded"] > 0
    assert reason.decode() in receipt["stop"]["reason"]
    assert "stops at event" in proc.stderr.decode()
    # Where: the application's line that forked, though the fork is the standard
    # library's (pty.fork's); the library's line follows it.
    line = next(i for i, text in enumerate(lines, 1) if "fork()" in text)
    where = f"{app}:{line}"
    assert receipt["stop"]["where"].split(", through ")[0] == where
    assert f"at {where}".encode() in rec.proc.stderr
    assert "pty.py" in receipt["stop"]["where"].split(", through ")[1]
    # Questions about the run up to the stop are answered: for them the run ends there (with
    # checkpoints too, as a session takes them).
    for at, want in (
        ("output", lines.index("print('before', time.time() > 0)") + 1),
        ("end", line),
    ):
        for checkpoints in ((), ("--checkpoint-every", "50")):
            proc = run_cli(
                "inspect-stack", str(tmp_path / "rec"), "--identity", str(keys.identity_path),
                "--in-process", "--at", at, "--json", *checkpoints,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr.decode()
            frame = json.loads(proc.stdout)["frames"][0]
            assert (frame["file"], frame["line"]) == (str(app), want), (at, checkpoints)


def _forge_meta(keys: KeyFiles, source: Path, target: Path, change: Any) -> None:
    records = stream_records(_plaintext(keys, source))
    meta = decode_value(records[0][1])
    change(meta)
    records[0] = (META, encode_value(meta))
    _reseal(keys, target, rebuilt_stream(records), str(meta["run_id"]))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(python="3.11.0 (forged)"), b"recorded with Python"),
        (lambda m: m["manifest"].append(["left-pad", "1.0"]), b"left-pad==1.0 is missing"),
        (lambda m: m["flags"].update(optimize=2), b"interpreter flags differ"),
        (lambda m: m.update(libraries=[*m["libraries"], "acme-driver"]), b"acme-driver"),
        (lambda m: m.update(filesystem_encoding="ascii"), b"recorded locale"),
    ],
)
def test_replay_refuses_another_environment(
    tmp_path: Path, keys: KeyFiles, change: Any, message: bytes
) -> None:
    app = write_app(tmp_path / "app", "print('hello')\n")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    _forge_meta(keys, tmp_path / "rec", tmp_path / "forged", change)
    proc, _ = replay(keys, tmp_path / "forged")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    # Control: the same rebuild without a change replays.
    _forge_meta(keys, tmp_path / "rec", tmp_path / "same", lambda m: None)
    assert_bit_exact(*replay(keys, tmp_path / "same"))


def test_replay_runs_without_any_network(tmp_path: Path, keys: KeyFiles) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("served over HTTP")
    server = subprocess.Popen(
        [PYTHON, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        port = server.stdout.readline().split("port ")[1].split(" ")[0]
        app = write_app(
            tmp_path / "app",
            """
            import sys, urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/index.html") as r:
                print(r.status, r.read())
            """,
        )
        rec = record(keys, tmp_path / "rec", [PYTHON, str(app), port])
    finally:
        server.kill()
        server.wait()
        assert server.stdout is not None
        server.stdout.close()
    assert rec.proc.stdout == b"200 b'served over HTTP'\n", rec.proc.stderr
    isolated = ["unshare", "--net", "--"]
    probe = "import socket; socket.create_connection(('127.0.0.1', 9))"
    check = subprocess.run([*isolated, PYTHON, "-c", probe],
                           capture_output=True, check=False)  # fmt: skip
    assert check.returncode != 0 and b"Network is unreachable" in check.stderr
    assert_bit_exact(*replay(keys, tmp_path / "rec", prefix=isolated))


def test_output_and_exit_status_pass_through(tmp_path: Path, keys: KeyFiles) -> None:
    source = """
    import sys
    print("to stdout"); print("to stderr", file=sys.stderr)
    if sys.argv[1] == "exit":
        sys.exit(7)
    raise ValueError("boom")
    """
    app = write_app(tmp_path / "app", source)
    for mode, status in (("exit", 7), ("raise", 1)):
        plain = subprocess.run([PYTHON, str(app), mode], capture_output=True, check=False)
        rec = record(keys, tmp_path / f"rec-{mode}", [PYTHON, str(app), mode])
        assert (rec.proc.returncode, rec.proc.stdout, rec.proc.stderr) == (
            plain.returncode, plain.stdout, plain.stderr,
        )  # fmt: skip
        assert plain.returncode == status
        proc, receipt = replay(keys, tmp_path / f"rec-{mode}")
        receipt = assert_bit_exact(proc, receipt)
        assert receipt["exit_status"] == {"recorded": status, "replayed": status}


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([], b"nothing to record"),
        ([PYTHON, "-E", "app.py"], b"cannot record with -E"),
        ([PYTHON, "missing.py"], b"can't open file"),
        ([PYTHON, "-W"], b"-W needs an argument"),
        ([PYTHON], b"no program to record"),
    ],
)
def test_record_usage_errors(
    tmp_path: Path, keys: KeyFiles, command: list[str], message: bytes
) -> None:
    rec = record(keys, tmp_path / "rec", command, cwd=tmp_path)
    assert rec.proc.returncode == 2, rec.proc.stderr
    assert message in rec.proc.stderr
    assert not (tmp_path / "rec").exists() or not any((tmp_path / "rec").iterdir())


def test_record_refuses_to_overwrite_a_recording(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(tmp_path / "app", "print(1)\n")
    assert record(keys, tmp_path / "rec", [PYTHON, str(app)]).proc.returncode == 0
    before = sorted(p.name for p in (tmp_path / "rec").iterdir())
    again = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert again.proc.returncode == 2 and b"already holds a recording" in again.proc.stderr
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == before
    assert_bit_exact(*replay(keys, tmp_path / "rec"))


def test_embedding_api_records_and_replays(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(
        tmp_path / "app",
        f"""
        import sealtrace.proxy
        sealtrace.proxy.start_recording({str(keys.recipient_path)!r}, {str(tmp_path / "rec")!r})
        import os, time
        print("embedded", time.time() > 0, os.urandom(4).hex())
        """,
    )
    plain_env = {**os.environ, "PYTHONHASHSEED": "123"}
    run = subprocess.run([PYTHON, str(app)], capture_output=True, env=plain_env, check=False)
    assert run.returncode == 0 and run.stdout.startswith(b"embedded True"), run.stderr
    assert b"sealtrace:" not in run.stderr
    receipt = assert_bit_exact(*replay(keys, tmp_path / "rec"))
    assert receipt["exit_status"]["recorded"] is None  # unknown to an embedded recorder
    assert Recipient.load(keys.recipient_path)


# What the program sees of its own __main__: the recorder makes it as the interpreter does
# (an absolute __file__ for a relative script, its loader, the builtins module, annotations).
MAIN_MODULE = """\
import sys, time
main = sys.modules["__main__"]
loader = main.__loader__
print(sys.argv, sys.flags.optimize, __name__, time.time() > 0)
print(globals().get("__file__"), sys.path[0] == "" or sys.path[0].startswith("/"))
if main.__spec__ is None:  # a script or -c (a module's loader is the import system's)
    print(getattr(loader, "__name__", type(loader).__name__), getattr(loader, "path", None))
print(type(__builtins__).__name__, sorted(k for k in vars(main) if k.startswith("__")))
"""


@pytest.mark.parametrize("form", ["script", "relative script", "module", "code"])
def test_every_target_form_records_and_replays(tmp_path: Path, keys: KeyFiles, form: str) -> None:
    tree = tmp_path / "app"
    source = MAIN_MODULE
    write_app(tree, source, "tool.py")
    command = {
        "script": [PYTHON, "-O", str(tree / "tool.py"), "a", "-x"],
        "relative script": [PYTHON, "./tool.py", "a"],
        "module": [PYTHON, "-B", "-m", "tool", "a", "-x"],
        "code": [PYTHON, "-X", "utf8", "-c", source, "a", "-x"],
    }[form]
    plain = subprocess.run(command, cwd=tree, capture_output=True, check=False)
    rec = record(keys, tmp_path / "rec", command, cwd=tree)
    assert (rec.proc.returncode, rec.proc.stdout) == (0, plain.stdout), rec.proc.stderr
    assert_bit_exact(*replay(keys, tmp_path / "rec"))


def test_a_script_run_by_a_relative_path_is_traced_by_its_name(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """`python calc.py` in its directory: the code is named absolutely, as the interpreter
    names it, and `--at calc.py:N` finds it (its recorded source has the same name)."""
    tree = tmp_path / "app"
    write_app(
        tree,
        "import time\nx = int(time.time()) % 7 + 3\ny = x * 2\nprint(y > 0)\n",
        "calc.py",
    )
    rec = record(keys, tmp_path / "rec", [PYTHON, "calc.py"], cwd=tree)
    assert rec.proc.returncode == 0, rec.proc.stderr
    doc = trace_json(tmp_path / "rec", keys, "calc.py:4", "y")
    calls = {(n["origin"] or {}).get("call") for n in walk(doc["root"])}
    assert "time.time" in calls, calls
    assert {n["file"] for n in walk(doc["root"]) if n.get("file")} == {str(tree / "calc.py")}


def test_a_program_that_ends_itself_with_a_signal_is_recorded_whole(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """As uvicorn does after a graceful shutdown: the handler it had is put back, and the
    signal it caught is raised again, at its default action. The recording ends there,
    complete, with the exit status a shell gives (128 + 15); replay ends there too, and
    questions are answered as at an exit."""
    source = """\
import signal, time
previous = signal.signal(signal.SIGTERM, lambda *a: None)
total = int(time.time()) % 5 + 10
print("total", total > 0, flush=True)
signal.signal(signal.SIGTERM, previous)
signal.raise_signal(signal.SIGTERM)
print("never")
"""
    app = write_app(tmp_path / "app", source)
    plain = subprocess.run([PYTHON, str(app)], capture_output=True, check=False)
    assert plain.returncode == -15 and plain.stdout == b"total True\n"
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app)])
    assert (rec.proc.returncode, rec.proc.stdout) == (143, plain.stdout), rec.proc.stderr
    receipt = assert_bit_exact(*replay(keys, tmp_path / "rec"))
    assert receipt["exit_status"] == {"recorded": 143, "replayed": 143}
    for checkpoints in ((), ("--checkpoint-every", "50")):
        doc = trace_json(tmp_path / "rec", keys, "end", "total", *checkpoints)
        assert doc["root"]["line"] == 3  # total = ...
        assert doc["query"]["stopped_at"]["line"] == 6  # the end: the signal raised
        calls = {(n["origin"] or {}).get("call") for n in walk(doc["root"])}
        assert "time.time" in calls, calls


def test_sigterm_reaches_the_program(tmp_path: Path, keys: KeyFiles) -> None:
    app = write_app(
        tmp_path / "app",
        """
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(9))
        print("ready", flush=True)
        time.sleep(30)
        """,
    )
    exe = Path(PYTHON).with_name("sealtrace")
    argv = [str(exe), "record", "--recipient", str(keys.recipient_path),
            "--output", str(tmp_path / "rec"), "--", PYTHON, str(app)]  # fmt: skip
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        finally:
            proc.kill()  # (a no-op once it has ended) nothing left running if this failed
    assert proc.returncode == 9, err
    proc, receipt = replay(keys, tmp_path / "rec")
    receipt = assert_bit_exact(proc, receipt)
    assert receipt["exit_status"]["recorded"] == 9


# The wrapper's window: a SIGTERM that reaches `sealtrace record` while it is starting the
# program (here, just before and just after the program's process is made) is passed on to
# the program, instead of ending the wrapper and leaving the program running unwatched.
_EARLY_SIGNAL = """
import os, signal, subprocess, sys
from sealtrace.proxy import _recording_cli

real = subprocess.Popen
class Popen(real):
    def __init__(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        super().__init__(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGHUP)
_recording_cli.subprocess.Popen = Popen
program = "import time; time.sleep(30)"
sys.exit(_recording_cli._run_child([sys.executable, "-c", program], dict(os.environ)))
"""


def test_a_signal_while_the_program_starts_reaches_the_program() -> None:
    proc = subprocess.run([PYTHON, "-c", _EARLY_SIGNAL], capture_output=True, timeout=60)
    # The program was ended by a signal passed on to it (the wrapper reports 128 + the
    # signal's number); -15 would be the wrapper itself ended, and 0 a program never told.
    assert proc.returncode in (128 + signal.SIGTERM, 128 + signal.SIGHUP), proc.stderr


def test_a_library_adds_its_own_boundary_entries(tmp_path: Path, keys: KeyFiles) -> None:
    # A third-party package (installed on the path with an entry point) declares that its
    # client's quote() is external; the recording serves it on replay, after the "service"
    # it talks to has changed.
    site = tmp_path / "site"
    dist = site / "acme_boundary-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-boundary\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[sealtrace.boundary]\nacme = acme_boundary:LIBRARY\n")
    (site / "acme_boundary.py").write_text(
        "from sealtrace.proxy import BoundaryEntry, BoundaryLibrary\n"
        "LIBRARY = BoundaryLibrary('acme', (BoundaryEntry('acme.quote', 'acme_client:quote'),))\n"
    )
    (site / "acme_client.py").write_text(
        "import pathlib\n"
        "def quote(sku):\n"
        "    return float(pathlib.Path(__file__).with_name('price.txt').read_bytes()) + len(sku)\n"
    )
    (site / "price.txt").write_text("49.99")
    app = write_app(tmp_path / "app", "import acme_client\nprint(acme_client.quote('MUG-01'))\n")
    env = {"PYTHONPATH": str(site)}
    rec = record(keys, tmp_path / "rec", [PYTHON, str(app)], env=env)
    assert rec.proc.stdout == b"55.99\n", rec.proc.stderr
    assert "acme.quote" in rec.callees(keys.identity)
    (site / "price.txt").write_text("0.00")  # the outside world changes after the run
    assert_bit_exact(*replay(keys, tmp_path / "rec"))
