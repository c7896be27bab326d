"""Python children as runs of their own (issue 23, item 4): a child the recorded program starts
running this interpreter — `subprocess` on `sys.executable`, `multiprocessing`'s spawn start
(a `Process`, a `Pool`'s workers, its resource tracker) — records itself as its own run beside
the parent's (`OUT-c1`, `OUT-c2`, ...), whose META names the run and event that started it.

Recorded for real, inputs deleted: the parent and every child replay bit-exact, each on its
own (the child's pipes from its parent are descriptors it was started with: their reads are
recorded in the child); a value in a child traces to the child's own read. A child that is not
this interpreter running Python (`/bin/echo`), or one `sealtrace record` would refuse (`-I`),
is started as it is, its I/O recorded at the parent's boundary as before.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sealtrace.proxy import write_keypair
from sealtrace.sandbox._replay_process import load_recording

from ..conftest import KeyFiles
from .replaying import PYTHON, assert_bit_exact, record, replay, trace_json, walk, write_app

pytestmark = pytest.mark.integration

PARENT = """\
import multiprocessing as mp, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))


def work(q, n):
    with open({data!r}) as f:
        q.put(n * len(f.read()))


def square(n):
    return n * n


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(q, 3))
    p.start()
    print("from the process", q.get(), flush=True)
    p.join()
    pool = ctx.Pool(2)
    print("from the pool", pool.map(square, range(5)), flush=True)
    pool.close()
    pool.join()
    child = subprocess.run([sys.executable, os.path.join(HERE, "child.py"), "7"],
                           capture_output=True, text=True)
    print("the child said", child.stdout.strip(), flush=True)
    isolated = subprocess.run([sys.executable, "-I", "-c", "print(6 * 7)"],
                              capture_output=True, text=True)
    print("isolated", isolated.stdout.strip(), flush=True)
    print("echo said", subprocess.run(["/bin/echo", "hi"], capture_output=True).stdout)
"""

CHILD = """\
import sys

with open({data!r}) as f:
    size = len(f.read())
value = int(sys.argv[1]) * size
print(value)
"""

EXPECTED = (
    b"from the process 6000\n"
    b"from the pool [0, 1, 4, 9, 16]\n"
    b"the child said 14000\n"
    b"isolated 42\n"
    b"echo said b'hi\\n'\n"
)


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory, family_keys: KeyFiles) -> list[Path]:
    """The parent's run, then its children's, recorded; the data file then deleted."""
    keys = family_keys
    tmp = tmp_path_factory.mktemp("children")
    data = tmp / "data.txt"
    data.write_text("d" * 2000)
    app = write_app(tmp / "app", PARENT.format(data=str(data)))
    write_app(tmp / "app", CHILD.format(data=str(data)), "child.py")
    store = tmp / "rec"
    done = record(keys, store, [PYTHON, str(app)])
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    assert done.proc.stdout == EXPECTED
    assert b"sealtrace" not in done.proc.stderr
    data.unlink()
    children = sorted(tmp.glob("rec-c*"), key=lambda p: int(p.name.rpartition("c")[2]))
    return [store, *children]


@pytest.fixture(scope="module")
def family_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return KeyFiles(*write_keypair(tmp_path_factory.mktemp("children-keys"), "test"))


def _meta(run: Path, keys: KeyFiles) -> dict[str, object]:
    return load_recording(str(run), keys.identity)[1].meta


def test_every_python_child_is_a_run_of_its_own_and_replays_bit_exact(
    family: list[Path], family_keys: KeyFiles
) -> None:
    keys = family_keys
    parent, *children = family
    # The resource tracker, the Process, two pool workers and the subprocess; not the
    # isolated child (-I: sealtrace would refuse it) nor /bin/echo.
    assert len(children) == 5
    parent_id = _meta(parent, keys)["run_id"]
    targets = []
    for child in children:
        meta = _meta(child, keys)
        link = meta["parent"]
        assert isinstance(link, dict) and link["run"] == parent_id and link["process"] == ""
        targets.append(meta["target"]["value"])  # type: ignore[index]
    assert sum("spawn_main" in t for t in targets) == 3  # the Process, the two workers
    assert sum("resource_tracker" in t for t in targets) == 1
    assert sum(t.endswith("child.py") for t in targets) == 1
    for run in family:
        assert_bit_exact(*replay(keys, run))


def _child(family: list[Path], keys: KeyFiles, target: str) -> Path:
    """The child run whose target holds `target` (the first, if several do)."""
    return next(c for c in family[1:] if target in str(_meta(c, keys)["target"]["value"]))  # type: ignore[index]


def test_a_value_in_a_child_traces_to_the_childs_read(
    family: list[Path], family_keys: KeyFiles
) -> None:
    doc = trace_json(_child(family, family_keys, "child.py"), family_keys, "end", "value",
                     "--depth", "12")  # fmt: skip
    assert doc["root"]["value"]["repr"] == "14000"
    calls = {(node.get("origin") or {}).get("call") for node in walk(doc["root"])}
    assert any(call and call.endswith("readall") for call in calls), calls


def test_a_spawned_process_replays_in_the_sandbox(
    family: list[Path], family_keys: KeyFiles, replay_image: str
) -> None:
    process = _child(family, family_keys, "spawn_main")
    assert_bit_exact(*replay(family_keys, process, "--sandbox"))


def test_a_child_started_without_the_recorder_is_the_parents_boundary_only(
    tmp_path: Path, keys: KeyFiles
) -> None:
    """Control: the same child started through `env -i` (another program first) is not
    recorded as a run; the parent records its output and replays bit-exact."""
    data = tmp_path / "data.txt"
    data.write_text("e" * 100)
    app = write_app(tmp_path / "app", CHILD.format(data=str(data)), "child.py")
    parent = write_app(
        tmp_path / "app",
        f"import subprocess, sys\n"
        f"out = subprocess.run(['/usr/bin/env', sys.executable, {str(app)!r}, '3'],"
        f" capture_output=True)\nprint(out.stdout)\n",
    )
    store = tmp_path / "rec"
    done = record(keys, store, [PYTHON, str(parent)])
    assert done.proc.returncode == 0 and done.proc.stdout == b"b'300\\n'\n", done.proc.stderr
    assert not list(tmp_path.glob("rec-c*"))
    data.unlink()
    assert_bit_exact(*replay(keys, store))


FORKSERVER = """\
import multiprocessing as mp


def work(q, n):
    with open({data!r}) as f:
        q.put(n * len(f.read()))


if __name__ == "__main__":
    ctx = mp.get_context("forkserver")
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(q, 5))
    p.start()
    print("from the forkserver's child", q.get(), flush=True)
    p.join()
"""


def test_a_forkservers_children_are_its_forked_processes(tmp_path: Path, keys: KeyFiles) -> None:
    """The forkserver is a Python child (its own run); the processes it forks for the parent
    are its forked processes (`--process 1`), which it hands their pipes over a Unix socket
    (SCM_RIGHTS: descriptors from outside, so their calls are recorded)."""
    data = tmp_path / "data.txt"
    data.write_text("f" * 300)
    app = write_app(tmp_path / "app", FORKSERVER.format(data=str(data)))
    store = tmp_path / "rec"
    done = record(keys, store, [PYTHON, str(app)])
    assert done.proc.returncode == 0, done.proc.stderr.decode()
    assert done.proc.stdout == b"from the forkserver's child 1500\n"
    data.unlink()
    children = list(tmp_path.glob("rec-c*"))
    (server,) = (c for c in children if "forkserver" in str(_meta(c, keys)["target"]["value"]))  # type: ignore[index]
    for run in (store, *children):
        assert_bit_exact(*replay(keys, run))
    worker = assert_bit_exact(*replay(keys, server, "--process", "1"))
    assert worker["exit_status"]["recorded"] == 0
