"""Record → replay → compare, for every entry of the boundary table.

Each library of the table has a program that exercises every one of its entries and prints
what it got back. The program is recorded with the real `sealtrace record`; its inputs are
then deleted (files removed, servers stopped); `sealtrace replay` must be bit-exact, which
includes every byte the program printed. A guard test fails when an entry is added to the
table without a program here.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sealtrace.proxy._boundary import BUILTIN_LIBRARIES
from sealtrace.proxy._runtime import IMPLEMENTATIONS

from ..conftest import KeyFiles
from .replaying import PYTHON, assert_bit_exact, record, replay, write_app

pytestmark = pytest.mark.integration


@dataclass
class Case:
    source: str
    expect: tuple[str, ...]  # callees that must appear in the recording
    args: tuple[str, ...] = ()
    stdin: bytes = b""
    env: dict[str, str] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    server: str | None = None  # "tcp" | "tls"


TIME = """
import time
for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
             "process_time", "process_time_ns", "thread_time", "thread_time_ns"):
    print(name, getattr(time, name)())
print(time.clock_gettime(time.CLOCK_REALTIME), time.clock_gettime_ns(time.CLOCK_MONOTONIC))
time.sleep(0.3)
print(time.localtime(), time.gmtime(), time.ctime(), time.asctime(), time.strftime("%c"))
"""

DATETIME = """
import datetime as dt
print(dt.datetime.now(), dt.datetime.now(dt.timezone.utc), dt.datetime.utcnow())
print(dt.datetime.today(), dt.date.today())
class Stamp(dt.datetime):
    pass
print(type(Stamp.now()).__name__, Stamp.now(dt.timezone(dt.timedelta(hours=2))))
"""

RANDOM = """
import os, random, secrets, uuid
print(random.random(), random.randint(1, 10**9), random.Random().random())
random.seed()
print(random.random(), random.SystemRandom().random(), secrets.token_hex(8))
print(os.urandom(8).hex(), os.getrandom(8).hex(), uuid.uuid4())
print(random.Random(42).random())
"""

UUID = """
import uuid
print(uuid.uuid1(), uuid.getnode())
"""

PROCESS = """
import os
print(os.getpid(), os.getppid(), os.getuid(), os.geteuid(), os.getgid(), os.getegid())
try:
    print(os.getlogin())
except OSError as exc:
    print("getlogin", type(exc).__name__)
print(os.cpu_count(), os.times(), os.uname(), os.getloadavg())
try:
    print(os.get_terminal_size())
except OSError as exc:
    print("terminal", exc.errno)
print(os.system("exit 3"))
print(os.getpgrp() > 0, os.getpgid(0) > 0, os.getsid(0) > 0)
pid = os.fork()  # each side recorded (tests/sandbox/test_forks.py); this replay is the parent
if pid == 0:
    os.setpgid(0, 0)
    try:
        os.setsid()
    except OSError as exc:  # a process group's leader cannot
        os._exit(exc.errno)
    os._exit(5)
print(os.waitpid(pid, 0)[1] >> 8)
pid = os.fork()
if pid == 0:
    import time
    time.sleep(60)
    os._exit(0)
os.kill(pid, 0)
os.killpg(os.getpgid(pid), 0)
os.kill(pid, 9)
print(os.wait() == (pid, 9))
pid = os.fork()
if pid == 0:
    os._exit(2)
print(os.waitid(os.P_PID, pid, os.WEXITED).si_status)
"""

SIGNALS = """
import os, signal, time
got = []
signal.signal(signal.SIGUSR1, lambda signum, frame: got.append(signum))
os.kill(os.getpid(), signal.SIGUSR1)
while not got:
    time.sleep(0.01)
print("got", got, signal.getsignal(signal.SIGUSR1) is not None)
"""

MULTIPROCESSING = """
import multiprocessing as mp
ctx = mp.get_context("fork")
lock, sem = ctx.Lock(), ctx.Semaphore(2)
with lock:
    print("locked", sem.get_value())
print(sem.acquire(timeout=0.1), sem.acquire(False), sem.acquire(False))
sem.release()
queue = ctx.Queue()
child = ctx.Process(target=queue.put, args=(42,))
child.start()
print(queue.get())
child.join()
print(child.exitcode)
from _multiprocessing import sem_unlink
try:
    sem_unlink("/sealtrace-no-such-semaphore")
except FileNotFoundError as exc:
    print("sem_unlink", type(exc).__name__)
"""

ENVIRON = """
import os
print(os.environ["SEALTRACE_ALLOWED"], os.environ.get("SEALTRACE_SECRET"), os.getenv("NOPE"))
print(len(os.environ) > 2, "HOME" in os.environ, sorted(os.environ)[:1])
os.environ["SET_HERE"] = "1"
print(os.environ.copy()["SET_HERE"], repr(os.environ)[:8])
"""

FILES = """
import os, pathlib, sys
root = pathlib.Path(sys.argv[1])
print((root / "data" / "note.txt").read_text())
with open(root / "input.bin", "rb") as f:
    print(f.read(3), f.tell(), f.seek(0), f.read(), os.fstat(f.fileno()).st_size, os.isatty(0))
with open(root / "out.txt", "w") as f:
    f.write("out\\n")
with open(root / "out.txt", "a+") as f:
    f.write("more\\n"); f.seek(0); print(f.read())
try:
    open(root / "missing.txt")
except FileNotFoundError as exc:
    print("missing", exc.errno, exc.filename == str(root / "missing.txt"))
st = os.stat(root / "input.bin")
print(st.st_size, os.lstat(root / "link").st_size, sorted(os.listdir(root)))
print(os.access(root, os.R_OK), os.readlink(root / "link"), os.getcwd(), os.getcwdb())
here = os.getcwd(); os.chdir(root); print(os.getcwd() == str(root)); os.chdir(here)
print(os.path.realpath(root / "link"), os.path.exists(root / "nope"), os.path.isdir(root))
with os.scandir(root) as it:
    for entry in sorted(it, key=lambda e: e.name):
        print(entry.name, entry.is_file(), entry.is_dir(), entry.is_symlink(), entry.stat().st_size)
for top, dirs, files in os.walk(root):
    print(top == str(root), sorted(files))
os.mkdir(root / "made"); os.symlink(root / "made", root / "sym")
os.link(root / "out.txt", root / "hard")
os.rename(root / "hard", root / "hard2"); os.replace(root / "hard2", root / "hard3")
os.chmod(root / "hard3", 0o600); os.utime(root / "hard3", (1, 2)); os.truncate(root / "hard3", 1)
os.remove(root / "hard3"); os.unlink(root / "sym"); os.rmdir(root / "made")
print(sorted(os.listdir(root)))
import shutil, tempfile
fd = os.open(root / "low.bin", os.O_CREAT | os.O_RDWR, 0o600)
os.write(fd, b"low"); os.lseek(fd, 0, 0); print(os.read(fd, 3)); os.fsync(fd); os.close(fd)
print(tempfile.gettempdir() == os.environ["TMPDIR"])
with tempfile.TemporaryDirectory() as tmp:
    with tempfile.NamedTemporaryFile(dir=tmp, delete=False) as t:
        t.write(b"temp")
    print(len(os.listdir(tmp)), os.path.basename(t.name).startswith("tmp"))
    shutil.rmtree(tmp)
    os.mkdir(tmp)
r, w = os.pipe(); os.write(w, b"piped"); print(os.read(r, 5)); os.close(r); os.close(w)
"""

STDIO = """
import sys
line = sys.stdin.readline()
rest = sys.stdin.read()
print("got", line.strip(), len(rest))
print("to stderr", file=sys.stderr)
sys.stdout.buffer.write(b"raw bytes\\n")
"""

SOCKET = """
import socket, sys
port = int(sys.argv[1])
print(socket.gethostname(), socket.getdefaulttimeout())
print(socket.getaddrinfo("127.0.0.1", port, type=socket.SOCK_STREAM)[0][0])
print(socket.gethostbyname("127.0.0.1"), socket.gethostbyname_ex("127.0.0.1")[2])
print(socket.gethostbyaddr("127.0.0.1")[2], socket.getnameinfo(("127.0.0.1", port), 0)[0])
print(socket.getservbyname("http"), socket.getservbyport(80))
socket.setdefaulttimeout(None)
with socket.create_connection(("127.0.0.1", port)) as s:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0, s.family, s.type)
    print(s.getpeername()[1] == port, s.getsockname()[0])
    s.sendall(b"hello\\n")
    print(s.recv(100))
    s.send(b"again\\n")
    buf = bytearray(100)
    n = s.recv_into(buf)
    print(bytes(buf[:n]))
    f = s.makefile("rwb")
    f.write(b"line\\n"); f.flush()
    print(f.readline())
    f.close()
    s.shutdown(socket.SHUT_RDWR)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("127.0.0.1", 0))
u.sendto(b"dgram", u.getsockname())
print(u.recvfrom(100)[0])
u.close()
a, b = socket.socketpair()
a.sendall(b"pair"); print(b.recv(4)); a.close(); b.close()
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
c = socket.create_connection(srv.getsockname())
conn, addr = srv.accept()
c.sendall(b"accepted"); print(conn.recv(100), conn.dup().fileno() > 0)
print(c.connect_ex(("127.0.0.1", 1)) != 0)
for x in (c, conn, srv):
    x.close()
"""

SELECT = """
import select, selectors, socket
a, b = socket.socketpair()
a.sendall(b"x")
print(select.select([b], [b], [], 1))
p = select.poll(); p.register(b, select.POLLIN); print(p.poll(1000)); p.modify(b, select.POLLOUT)
print(p.poll(0)); p.unregister(b)
e = select.epoll(); e.register(b.fileno(), select.EPOLLIN); print(e.poll(1))
e.modify(b, select.EPOLLOUT)
print(e.poll(0)); e.unregister(b); e.close()
with selectors.DefaultSelector() as sel:
    sel.register(b, selectors.EVENT_READ, "data")
    print([(k.data, m) for k, m in sel.select(1)])
print(b.recv(1))
"""

SSL = """
import socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[2])
with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as raw:
    with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
        print(tls.version(), tls.cipher() is not None, tls.getpeercert()["subject"])
        print(tls.selected_alpn_protocol(), tls.pending())
        tls.sendall(b"secret plaintext\\n")
        print(tls.recv(100))
        tls.write(b"more\\n")
        print(tls.read(100))
"""

SUBPROCESS = """
import subprocess, sys
print(subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout)
print(subprocess.check_output("printf 'a\\\\nb'", shell=True))
p = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
print(p.communicate(b"through cat"), p.returncode, p.pid > 0)
q = subprocess.Popen(["sh", "-c", "read x; echo got $x; exit 4"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
q.stdin.write("line\\n"); q.stdin.close()
print(q.stdout.read(), q.wait(), q.poll())
r = subprocess.Popen(["sleep", "5"]); r.terminate(); print(r.wait())
k = subprocess.Popen(["sleep", "5"]); k.kill(); print(k.wait())
s = subprocess.Popen(["sleep", "5"]); s.send_signal(15); print(s.wait())
try:
    subprocess.run(["/nonexistent-binary"])
except FileNotFoundError as exc:
    print("missing", exc.errno)
"""

SQLITE = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("create table t (id integer primary key, name text, score real, blob blob)")
cur = db.executemany("insert into t (name, score, blob) values (?, ?, ?)",
                     [("a", 1.5, b"x"), ("b", None, None), ("c", -0.0, b"")])
print(cur.rowcount, cur.lastrowid, db.in_transaction, db.total_changes)
db.commit()
db.execute("insert into t (name) values ('rolled back')"); db.rollback()
cur = db.cursor(); cur.execute("select * from t order by id")
print(cur.description, cur.fetchone(), cur.fetchmany(1), cur.fetchall())
db.row_factory = sqlite3.Row
row = db.execute("select name, score from t where id = ?", (1,)).fetchone()
print(type(row).__name__, row.keys(), row["name"], tuple(row))
db.row_factory = lambda cursor, r: {d[0]: v for d, v in zip(cursor.description, r)}
print([r for r in db.execute("select id, name from t")])
db.executescript("create table u (x); insert into u values (1);")
print(db.isolation_level, list(db.iterdump())[:2])
try:
    db.execute("select * from nope")
except sqlite3.OperationalError as exc:
    print("error", exc)
with db:
    db.execute("insert into u values (2)")
db.close()
"""

CASES: dict[str, Case] = {
    "time": Case(TIME, tuple(f"time.{n}" for n in (
        "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
        "process_time", "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime",
        "clock_gettime_ns", "sleep", "localtime", "gmtime",
        "ctime", "asctime", "strftime"))),
    "datetime": Case(DATETIME, ("datetime.datetime.now", "datetime.datetime.utcnow")),
    "random": Case(RANDOM, ("random.Random.seed", "os.urandom", "os.getrandom")),
    "uuid": Case(UUID, ("uuid.uuid1", "uuid.getnode")),
    "process": Case(PROCESS, tuple(f"os.{n}" for n in (
        "getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getlogin", "cpu_count",
        "times", "uname", "get_terminal_size", "getloadavg", "system", "getpgrp", "getpgid",
        "getsid", "fork", "waitpid", "kill", "killpg", "wait", "waitid"))),
    "signals": Case(SIGNALS, ("signal.deliver",)),
    "multiprocessing": Case(MULTIPROCESSING, ("multiprocessing.SemLock", "semlock.acquire",
                                              "semlock.release", "semlock._get_value",
                                              "os.fork", "os.waitpid",
                                              "_multiprocessing.sem_unlink")),
    "environ": Case(ENVIRON, ("os.environ.__getitem__",), env={
        "SEALTRACE_ALLOWED": "shown", "SEALTRACE_SECRET": "read lazily"},
        options=("--env-allow", "SEALTRACE_ALLOWED")),
    "files": Case(FILES, ("open", "file.read", "file.write", "file.seek", "os.stat", "os.lstat",
                          "os.open", "os.write", "os.read", "os.close", "os.pipe", "os.lseek",
                          "open.fd",
                          "os.listdir", "os.access", "os.readlink", "os.getcwd", "os.getcwdb",
                          "os.chdir",
                          "os.path.realpath", "os.scandir", "os.DirEntry.stat")),
    "stdio": Case(STDIO, ("stdin.read", "stdout.write", "stderr.write"),
                  stdin=b"first line\nand the rest\n"),
    "socket": Case(SOCKET, ("_socket.getaddrinfo", "_socket.gethostname", "socket.socket",
                            "socket.connect", "socket.sendall", "socket.recv", "socket.recv_into",
                            "socket.accept", "socket.sendto", "socket.recvfrom",
                            "socket.socketpair", "socket.setsockopt", "socket.close"),
                   server="tcp"),
    "select": Case(SELECT, ("select.select", "select.poll.poll", "select.epoll",
                            "select.epoll.poll")),
    "ssl": Case(SSL, ("ssl.wrap_socket", "ssl.sendall", "ssl.recv", "ssl.write", "ssl.read",
                      "ssl.SSLContext.load_verify_locations"), server="tls"),
    "subprocess": Case(SUBPROCESS, ("subprocess.Popen", "subprocess.Popen.communicate",
                                    "subprocess.Popen.wait", "subprocess.stdout.readall")),
    "sqlite3": Case(SQLITE, ("sqlite3.connect", "sqlite3.Cursor.execute",
                             "sqlite3.Cursor.fetchone", "sqlite3.Connection.commit")),
}  # fmt: skip

ECHO_SERVER = """
import socketserver, sys
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line.upper())
with socketserver.TCPServer(("127.0.0.1", 0), Echo) as server:
    print(server.server_address[1], flush=True)
    server.serve_forever()
"""

TLS_SERVER = """
import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
with socket.create_server(("127.0.0.1", 0)) as srv:
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept()
    with ctx.wrap_socket(conn, server_side=True) as tls:
        f = tls.makefile("rwb")
        for line in f:
            f.write(line.upper()); f.flush()
"""


def _self_signed(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def server_factory() -> Iterator[Callable[[str, list[str]], tuple[int, subprocess.Popen[bytes]]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(source: str, args: list[str]) -> tuple[int, subprocess.Popen[bytes]]:
        proc = subprocess.Popen(
            [PYTHON, "-c", source, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        started.append(proc)
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        return port, proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_every_entry_has_a_program() -> None:
    libraries = {lib.name for lib in BUILTIN_LIBRARIES}
    assert libraries - set(CASES) == {"concurrency"}  # covered by test_replay_controls
    for lib in BUILTIN_LIBRARIES:
        if lib.name in CASES:
            calls = {e.name for e in lib.entries if e.kind == "call"}
            source = CASES[lib.name].source
            missing = {c for c in calls if c.rsplit(".", 1)[-1] not in source}
            assert not missing, f"{lib.name}: no program line calls {sorted(missing)}"


@pytest.mark.parametrize("recorder", IMPLEMENTATIONS)  # the C per-call path and its reference
@pytest.mark.parametrize("library", sorted(CASES))
def test_record_replay_compare(
    library: str,
    recorder: str,
    tmp_path: Path,
    keys: KeyFiles,
    server_factory: Callable[..., tuple[int, subprocess.Popen[bytes]]],
) -> None:
    case = CASES[library]
    app = write_app(tmp_path / "app", case.source)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    args = list(case.args)
    env = dict(case.env, SEALTRACE_RECORDER=recorder)
    server = None
    if library == "files":
        (inputs / "data").mkdir()
        (inputs / "data" / "note.txt").write_text("recorded note")
        (inputs / "input.bin").write_bytes(b"abcdef")
        (inputs / "link").symlink_to(inputs / "input.bin")
        args = [str(inputs)]
        (inputs / "tmp").mkdir()
        env["TMPDIR"] = str(inputs / "tmp")
    elif library == "sqlite3":
        args = [str(inputs / "db.sqlite")]
    elif case.server == "tcp":
        port, server = server_factory(ECHO_SERVER, [])
        args = [str(port)]
    elif case.server == "tls":
        cert, key = _self_signed(inputs)
        port, server = server_factory(TLS_SERVER, [str(cert), str(key)])
        args = [str(port), str(cert)]

    recorded = record(
        keys, tmp_path / "rec", [PYTHON, str(app), *args], *case.options,
        env=env, stdin=case.stdin,
    )  # fmt: skip
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    assert b"sealtrace:" not in recorded.proc.stderr, recorded.proc.stderr.decode()
    callees = set(recorded.callees(keys.identity))
    assert set(case.expect) <= callees, sorted(set(case.expect) - callees)

    # Take the world away: inputs deleted, servers stopped, environment not passed on.
    if server is not None:
        server.kill()
        server.wait()
    for path in sorted(inputs.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()

    started = time.monotonic()
    before = sorted(tmp_path.rglob("*"))
    proc, receipt = replay(keys, tmp_path / "rec")
    receipt = assert_bit_exact(proc, receipt)
    assert sorted(tmp_path.rglob("*")) == before  # replay wrote nothing, anywhere it was told
    assert receipt["outputs_matched"] > 0
    if library == "time":
        assert time.monotonic() - started < 5  # sleeps are skipped on replay
        assert receipt["seconds"] < 0.3


def test_replay_serves_values_that_differ_from_a_fresh_run(tmp_path: Path, keys: KeyFiles) -> None:
    # Negative control for the comparison itself: a second recording of the same program
    # prints different bytes, so bit-exact replay really means the recorded values were served.
    app = write_app(
        tmp_path / "app", "import os, time\nprint(time.time_ns(), os.urandom(8).hex())\n"
    )
    first = record(keys, tmp_path / "one", [PYTHON, str(app)])
    second = record(keys, tmp_path / "two", [PYTHON, str(app)])
    assert first.proc.stdout != second.proc.stdout
    for rec in (first, second):
        assert_bit_exact(*replay(keys, rec.location))
