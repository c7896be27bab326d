"""The corpus acceptance test: real programs the team did not write, run unmodified.

Each case runs one command-line program, from the standard library or from a PyPI package of
the `dev` extra, as `python -m MODULE ARGS` under `sealtrace record`, checks that the program
really did its job, then deletes everything the program read or wrote (its whole working
directory, caches included) and stops any server it talked to, and finally replays the
recording with `sealtrace replay --json`, which must be bit-exact. Replay must not recreate
anything in the deleted directory either: it never writes a file.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles

PYTHON = sys.executable
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))

Proc = subprocess.CompletedProcess[bytes]


@dataclass
class Run:
    """One program run: `python -m module *args`, and what the real run must show."""

    module: str
    args: list[str]
    status: int = 0
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    stdout: tuple[str, ...] = ()  # substrings the program's stdout must hold
    check: Callable[[Proc], None] | None = None  # anything else (files it wrote ...)
    servers: tuple[int, ...] = ()  # loopback ports of servers it talks to (stopped for replay)


Prepare = Callable[[Path, ExitStack], Run]
PROGRAMS: dict[str, Prepare] = {}


def program(name: str) -> Callable[[Prepare], Prepare]:
    def register(prepare: Prepare) -> Prepare:
        PROGRAMS[name] = prepare
        return prepare

    return register


PY_SOURCE = """\
import sys
import os
from collections import OrderedDict, defaultdict
def area( width,height ):
    return width*height
print(area(2, 3), OrderedDict, defaultdict, undefined_name)
"""


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- the standard library's command-line modules ---------------------------------------------


@program("json.tool")
def _json_tool(work: Path, stack: ExitStack) -> Run:
    _write(work / "in.json", '{"b": 1, "a": [true, null, "caf\\u00e9", 2.5e3]}')

    def check(proc: Proc) -> None:
        assert json.loads((work / "out.json").read_text()) == {
            "a": [True, None, "café", 2500.0],
            "b": 1,
        }

    return Run("json.tool", ["--sort-keys", "in.json", "out.json"], check=check)


@program("zipfile-create")
def _zipfile_create(work: Path, stack: ExitStack) -> Run:
    _write(work / "tree" / "a.txt", "alpha\n")
    _write(work / "tree" / "sub" / "b.txt", "beta\n" * 100)

    def check(proc: Proc) -> None:
        with zipfile.ZipFile(work / "out.zip") as archive:
            assert archive.read("tree/sub/b.txt") == b"beta\n" * 100
            assert archive.read("tree/a.txt") == b"alpha\n"

    return Run("zipfile", ["-c", "out.zip", "tree"], check=check)


@program("tarfile-list")
def _tarfile_list(work: Path, stack: ExitStack) -> Run:
    _write(work / "src" / "one.txt", "one\n")
    _write(work / "src" / "two.txt", "two two\n")
    with tarfile.open(work / "archive.tar.gz", "w:gz") as archive:
        archive.add(work / "src", arcname="src")
    return Run(
        "tarfile",
        ["-v", "-l", "archive.tar.gz"],
        stdout=("src/one.txt", "src/two.txt", "rw-r--r--"),
    )


@program("gzip")
def _gzip(work: Path, stack: ExitStack) -> Run:
    text = "a line of notes to compress\n" * 200
    _write(work / "notes.txt", text)

    def check(proc: Proc) -> None:
        assert gzip.decompress((work / "notes.txt.gz").read_bytes()).decode() == text

    return Run("gzip", ["notes.txt"], check=check)


@program("base64-stdin")
def _base64(work: Path, stack: ExitStack) -> Run:
    payload = bytes(range(256)) * 4
    return Run(
        "base64",
        ["-d"],
        stdin=base64.encodebytes(payload),
        check=lambda proc: _equal(proc.stdout, payload),
    )


@program("calendar")
def _calendar(work: Path, stack: ExitStack) -> Run:
    # No arguments: this year's calendar, so the program reads the clock.
    return Run("calendar", [], stdout=("January", "December", "Mo Tu We Th Fr Sa Su"))


@program("tokenize")
def _tokenize(work: Path, stack: ExitStack) -> Run:
    _write(work / "area.py", PY_SOURCE)
    return Run("tokenize", ["-e", "area.py"], stdout=("NAME", "'area'", "ENDMARKER"))


@program("pickletools")
def _pickletools(work: Path, stack: ExitStack) -> Run:
    # Protocol 4 bytes for {"name": "corpus", "values": [1, 2.5, None, (b"raw", "text")],
    # "nested": {"k": True}}, written out so that nothing here uses pickle; pickletools only
    # disassembles them.
    (work / "data.pkl").write_bytes(
        b"\x80\x04\x95N\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x04name\x94\x8c\x06corpus"
        b"\x94\x8c\x06values\x94]\x94(K\x01G@\x04\x00\x00\x00\x00\x00\x00NC\x03raw\x94"
        b"\x8c\x04text\x94\x86\x94e\x8c\x06nested\x94}\x94\x8c\x01k\x94\x88su."
    )
    return Run("pickletools", ["-a", "data.pkl"], stdout=("PROTO", "SHORT_BINUNICODE 'corpus'"))


@program("filecmp")
def _filecmp(work: Path, stack: ExitStack) -> Run:
    _write(work / "left" / "same.txt", "identical\n")
    _write(work / "left" / "changed.txt", "old\n")
    _write(work / "left" / "gone.txt", "only left\n")
    _write(work / "right" / "same.txt", "identical\n")
    _write(work / "right" / "changed.txt", "new and longer\n")
    _write(work / "right" / "added.txt", "only right\n")
    return Run(
        "filecmp",
        ["left", "right"],
        stdout=("Only in left : ['gone.txt']", "Identical files : ['same.txt']", "changed.txt"),
    )


@program("timeit")
def _timeit(work: Path, stack: ExitStack) -> Run:
    # Every timing comes from the clock, which replay serves from the recording.
    return Run(
        "timeit",
        ["-n", "200", "-r", "3", "sorted(range(200), key=lambda v: -v)"],
        stdout=("200 loops, best of 3",),
    )


# -- PyPI packages of the dev extra ----------------------------------------------------------


@program("httpie")
def _httpie(work: Path, stack: ExitStack) -> Run:
    site = work / "site"
    _write(site / "data.json", '{"greeting": "hello", "numbers": [1, 2, 3]}')
    port = _serve(site, stack)
    # A config of its own: no update check (it would spawn a daemon that goes online).
    _write(work / "httpie" / "config.json", '{"disable_update_warnings": true}')
    return Run(
        "httpie",
        ["--ignore-stdin", "--pretty=format", "--print=hb", "GET", f"http://127.0.0.1:{port}/data.json"],
        env={"HTTPIE_CONFIG_DIR": str(work / "httpie"), "NO_PROXY": "127.0.0.1"},
        stdout=("HTTP/1.0 200 OK", "application/json", '"greeting": "hello"'),
        servers=(port,),
    )  # fmt: skip


def _books(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("create table books (id integer primary key, title text, author text, year)")
        db.executemany(
            "insert into books (title, author, year) values (?, ?, ?)",
            [
                ("Dune", "Herbert", 1965),
                ("Neuromancer", "Gibson", 1984),
                ("Hyperion", "Simmons", 1989),
            ],
        )
    db.close()


@program("sqlite-utils-query")
def _sqlite_utils_query(work: Path, stack: ExitStack) -> Run:
    _books(work / "books.db")
    return Run(
        "sqlite_utils",
        ["query", "books.db", "select author, year from books where year > 1970 order by year",
         "--table"],
        stdout=("Gibson", "1984", "Simmons", "1989"),
    )  # fmt: skip


@program("sqlite-utils-insert")
def _sqlite_utils_insert(work: Path, stack: ExitStack) -> Run:
    _books(work / "books.db")
    _write(
        work / "new.json",
        '[{"title": "Solaris", "author": "Lem", "year": 1961},'
        ' {"title": "Ubik", "author": "Dick", "year": 1969}]',
    )

    def check(proc: Proc) -> None:
        with sqlite3.connect(work / "books.db") as db:
            rows = db.execute("select title from books order by year").fetchall()
        db.close()
        assert [r[0] for r in rows] == ["Solaris", "Dune", "Ubik", "Neuromancer", "Hyperion"]

    return Run("sqlite_utils", ["insert", "books.db", "books", "new.json"], check=check)


@program("mako-render")
def _mako(work: Path, stack: ExitStack) -> Run:
    _write(
        work / "page.mako",
        '<%def name="row(i, item)">${i}. ${item | h}</%def>\n'
        "Hello ${name}!\n"
        '% for i, item in enumerate(items.split(","), 1):\n'
        "${row(i, item)}\n"
        "% endfor\n",
    )
    return Run(
        "mako.cmd",
        ["--var", "name=World", "--var", "items=a<b,c&d,e", "page.mako"],
        stdout=("Hello World!", "1. a&lt;b", "2. c&amp;d", "3. e"),
    )


@program("markdown")
def _markdown(work: Path, stack: ExitStack) -> Run:
    _write(
        work / "doc.md",
        "# Title\n\nSome *emphasis* and `code`.\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n",
    )
    return Run(
        "markdown",
        ["-x", "extra", "doc.md"],
        stdout=("<h1>Title</h1>", "<em>emphasis</em>", "<table>", "<li>two</li>"),
    )


@program("docutils")
def _docutils(work: Path, stack: ExitStack) -> Run:
    _write(
        work / "doc.rst",
        "Title\n=====\n\nA paragraph with *emphasis* and ``literal``.\n\n"
        "* item one\n* item two\n\n.. note:: A note.\n",
    )

    def check(proc: Proc) -> None:
        html = (work / "doc.html").read_text(encoding="utf-8")
        assert "<title>Title</title>" in html and "<em>emphasis</em>" in html

    return Run("docutils", ["doc.rst", "doc.html"], check=check)


@program("pyflakes")
def _pyflakes(work: Path, stack: ExitStack) -> Run:
    _write(work / "area.py", PY_SOURCE)
    return Run(
        "pyflakes",
        ["area.py"],
        status=1,
        stdout=("'sys' imported but unused", "undefined name 'undefined_name'"),
        # It exits with SystemExit(True): status 1, and nothing printed for it.
        check=lambda proc: _equal(proc.stderr, b""),
    )


@program("pycodestyle")
def _pycodestyle(work: Path, stack: ExitStack) -> Run:
    _write(work / "area.py", PY_SOURCE)
    return Run("pycodestyle", ["area.py"], status=1, stdout=("E302", "E201", "E231"))


@program("black")
def _black(work: Path, stack: ExitStack) -> Run:
    _write(work / "area.py", PY_SOURCE)
    env = {"BLACK_CACHE_DIR": str(work / "black-cache")}
    # An unrecorded first run fills the grammar cache; writing it goes through os.open,
    # which is not behind the boundary. The recorded run then only reads the cache.
    warm = subprocess.run(
        [PYTHON, "-m", "black", "--check", "-q", "area.py"],
        cwd=work,
        env={**os.environ, **env},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert warm.returncode == 1, warm.stderr
    return Run(
        "black",
        ["--check", "--diff", "area.py"],
        status=1,
        env=env,
        stdout=("+def area(width, height):", "+    return width * height"),
    )


@program("isort")
def _isort(work: Path, stack: ExitStack) -> Run:
    _write(work / "area.py", PY_SOURCE)
    return Run(
        "isort",
        ["--check-only", "--diff", "area.py"],
        status=1,
        stdout=("+import os\n import sys\n-import os", "area.py:after"),
    )


@program("pygments")
def _pygments(work: Path, stack: ExitStack) -> Run:
    _write(work / "area.py", PY_SOURCE)
    return Run(
        "pygments",
        ["-f", "html", "-O", "full,linenos=table", "area.py"],
        stdout=("<html>", 'class="highlight"', "area"),
    )


# -- helpers ---------------------------------------------------------------------------------


def _equal(actual: bytes, expected: bytes) -> None:
    assert actual == expected


def _serve(directory: Path, stack: ExitStack) -> int:
    """A real HTTP server, in a process of its own, on a free loopback port."""
    server = subprocess.Popen(
        [PYTHON, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
         "--directory", str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    stack.callback(_stop, server)
    assert server.stdout is not None
    banner = server.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...) ..."
    found = re.search(rb"port (\d+)", banner)
    assert found, f"http.server did not start: {banner!r}"
    return int(found.group(1))


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    if server.stdout is not None:
        server.stdout.close()


def _port_closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _record(keys: KeyFiles, location: Path, run: Run, cwd: Path) -> Proc:
    command = [PYTHON, "-m", run.module, *run.args]
    return subprocess.run(
        [SEALTRACE, "record", "--recipient", str(keys.recipient_path), "--output", str(location),
         "--", *command],
        input=run.stdin,
        capture_output=True,
        cwd=cwd,
        env={**os.environ, **run.env},
        timeout=120,
        check=False,
    )  # fmt: skip


def _replay(keys: KeyFiles, location: Path) -> tuple[Proc, dict[str, Any]]:
    proc = subprocess.run(
        [
            SEALTRACE,
            "replay",
            str(location),
            "--identity",
            str(keys.identity_path),
            "--json",
            "--in-process",
        ],  # the corpus's programs are trusted: what is tested is replay
        capture_output=True,
        cwd=location.parent,
        timeout=120,
        check=False,
    )
    try:
        receipt = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"replay printed no receipt (exit {proc.returncode}): {proc.stderr.decode()}")
    return proc, receipt


# -- the test --------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_replays_bit_exact_with_its_inputs_deleted(
    name: str, keys: KeyFiles, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    location = tmp_path / "recording"
    with ExitStack() as stack:
        run = PROGRAMS[name](work, stack)
        recorded = _record(keys, location, run, work)
        stderr = recorded.stderr.decode("utf-8", "replace")
        assert recorded.returncode == run.status, stderr
        assert "sealtrace:" not in stderr, stderr  # the recording started and completed
        stdout = recorded.stdout.decode("utf-8", "replace")
        for needle in run.stdout:
            assert needle in stdout, stdout
        if run.check is not None:
            run.check(recorded)
    # Inputs gone: the servers were stopped as the stack closed; now every file the program
    # read or wrote, and the directory they were in.
    for port in run.servers:
        assert _port_closed(port)
    shutil.rmtree(work)

    proc, receipt = _replay(keys, location)

    assert proc.returncode == 0, (receipt, proc.stderr.decode())
    assert receipt["status"] == "bit-exact", receipt
    assert receipt["divergence"] is None
    assert receipt["events_replayed"] == receipt["events_recorded"] > 0
    assert receipt["outputs_matched"] > 0 and receipt["output_bytes"] > 0
    assert receipt["exit_status"] == {"recorded": run.status, "replayed": run.status}
    assert not work.exists(), "replay recreated the deleted working directory"

    # The provenance engine follows the same run without changing it: a pass with the
    # engine attached replays every event (a divergence would raise here), the run's end is
    # found, and the shadow stacks stay in step with the interpreter's.
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._replay_process import load_recording

    data, parsed = load_recording(str(location), keys.identity)
    survey = Inquiry(data, parsed).survey()
    stats = survey["stats"]
    assert survey["instructions"] > 1000 and stats["frames"] > 10
    assert stats["callback_errors"] == 0
    assert stats["depth_mismatches"] == 0, stats
    assert stats["live_frames"] == 0
    assert not work.exists(), "the engine's replay recreated the deleted working directory"
