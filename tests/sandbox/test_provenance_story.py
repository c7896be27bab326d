"""The £0.00 story (examples/pricing): the checkout job is recorded serving one order, its
inputs are taken away, and provenance walks from the wrong total back to the promotions read.

Also the query commands' contracts: the --json schema of `trace`, `flows` from an event and
from a value, `inspect-stack`, and one clear error with its exit code for every bad question.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sealtrace.sandbox.questions import Flows, InspectStack, Trace

from ..conftest import REPO, KeyFiles, run_cli
from .replaying import record

APP = REPO / "examples" / "pricing"
NODE_KEYS = {"counter", "file", "line", "function", "op", "value", "origin", "inputs"}


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("story")
    keys = KeyFiles(*write_keypair(work / "keys", "story"))
    inputs = work / "inputs"
    server = subprocess.Popen(
        [sys.executable, str(APP / "serve_inputs.py"), str(inputs)], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        recorded = record(
            keys,
            work / "store",
            [sys.executable, str(APP / "app.py"), f"http://127.0.0.1:{port}/order.json",
             str(inputs / "promotions.db")],
            "--app-root", str(APP),
        )  # fmt: skip
    finally:
        server.kill()
        server.wait()
        assert server.stdout is not None
        server.stdout.close()
    assert recorded.proc.returncode == 0, recorded.proc.stderr.decode()
    assert b'"total_price": 0.0' in recorded.proc.stdout
    shutil.rmtree(inputs)  # nothing the run read is left
    return work / "store", keys


def _cli(store: Path, keys: KeyFiles, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The command in-process (this recording is the tests' own), unless it asks for the
    sandbox."""
    command, *rest = args
    where = [] if "--sandbox" in rest else ["--in-process"]
    return run_cli(command, str(store), "--identity", str(keys.identity_path), *where, *rest)


def _trace(store: Path, keys: KeyFiles, at: str, var: str, depth: int = 12) -> dict[str, Any]:
    proc = _cli(store, keys, "trace", "--at", at, "--var", var, "--depth", str(depth), "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node["inputs"]:
        yield from _nodes(child)


def _find(node: dict[str, Any], **want: Any) -> dict[str, Any]:
    for n in _nodes(node):
        if all(want[k](n) if callable(want[k]) else n.get(k) == want[k] for k in want):
            return n
    raise AssertionError(f"no node with {want}")


def _call(node: dict[str, Any]) -> str | None:
    return (node["origin"] or {}).get("call")


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_three_jumps_from_the_wrong_total_to_the_promotions_read(
    story: tuple[Path, KeyFiles],
) -> None:
    store, keys = story
    pricing = APP / "services" / "pricing.py"
    promotions = APP / "services" / "promotions.py"
    doc = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    q = doc["query"]
    assert q["value"]["repr"] == "0.0" and q["slot"] == "order.total_price"
    assert q["stopped_at"]["function"] == "create_order_response"

    # Jump 1: the symptom comes from the pricing service's total (rounded).
    root = doc["root"]
    assert root["file"] == str(pricing) and root["function"] == "calculate_total"
    assert root["value"]["repr"] == "0.0"

    # Jump 2: the line computing the total: subtotal 49.99 times (1 - discount 1.0).
    total_line = _line(pricing, "total = subtotal * (1 - discount)")
    product = _find(root, file=str(pricing), line=total_line, op="BINARY_OP *")
    assert product["value"]["repr"] == "0.0"
    operands = {n["value"]["repr"] for n in product["inputs"]}
    assert "49.99" in operands
    minus = _find(product, op="BINARY_OP -")
    discount = next(n for n in minus["inputs"] if n["value"]["repr"] == "1.0")

    # Jump 3: the discount comes from the promotions read: an external input, 100 (STAFF100).
    read = _find(discount, origin=lambda n: (n["origin"] or {}).get("kind") == "external")
    assert read["file"] == str(promotions)
    assert read["origin"]["call"] == "sqlite3.Cursor.fetchone"
    assert read["value"]["repr"] == "(100,)"
    execute = _find(read, origin=lambda n: _call(n) == "sqlite3.Cursor.execute")
    assert isinstance(execute["origin"]["event"], int)
    assert execute["origin"]["event"] < read["origin"]["event"]

    # The text output reads like the walk-through and names the STAFF100 lookup.
    proc = _cli(store, keys, "trace", "--at", "routes/orders.py:4", "--var", "order.total_price")
    text = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    assert "total = subtotal * (1 - discount)" in text
    assert "subtotal = 49.99" in text and "discount = 1.0" in text
    assert "('STAFF100',)" in text
    assert "External input: sqlite3.Cursor.fetchone" in text


def test_trace_json_is_exactly_the_documented_schema(story: tuple[Path, KeyFiles]) -> None:
    store, keys = story
    doc = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    assert set(doc) == {"query", "root"}
    for node in _nodes(doc["root"]):
        assert set(node) == NODE_KEYS
        assert isinstance(node["counter"], int) and isinstance(node["line"], int)
        assert set(node["value"]) == {"type", "repr", "digest"}
        if node["origin"] is not None:
            assert set(node["origin"]) == {"kind", "call", "event"}
            assert node["origin"]["kind"] in {"external", "constant", "argv", "env", "unknown"}
    # Operands come from earlier steps; only values that Python code handed back to C while
    # a step ran (a generator feeding sum()) come from later ones, and never from itself.
    for node in _nodes(doc["root"]):
        for child in node["inputs"]:
            assert child["counter"] != node["counter"]
            if child["counter"] and not node["op"].startswith("CALL"):
                assert child["counter"] < node["counter"]


def test_same_answer_every_time_and_from_a_counter(story: tuple[Path, KeyFiles]) -> None:
    store, keys = story
    first = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    again = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    assert first["root"] == again["root"]
    counter = first["query"]["stopped_at"]["counter"]
    by_counter = _trace(store, keys, str(counter), "order.total_price")
    assert by_counter["root"] == first["root"]


def test_argv_origin_and_end(story: tuple[Path, KeyFiles]) -> None:
    store, keys = story
    doc = _trace(store, keys, "end", "main", depth=2)
    assert doc["root"]["op"].startswith("MAKE_FUNCTION")
    db = _trace(store, keys, "services/promotions.py:2", "db", depth=3)
    argv = _find(db["root"], op="argv[2]")
    assert argv["origin"]["kind"] == "argv" and argv["value"]["repr"].endswith("promotions.db'")


def test_flows_from_the_promotions_read_reach_the_response(story: tuple[Path, KeyFiles]) -> None:
    store, keys = story
    doc = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    read = _find(doc["root"], origin=lambda n: _call(n) == "sqlite3.Cursor.fetchone")
    proc = _cli(store, keys, "flows", "--from", f"event:{read['origin']['event']}", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    flows = json.loads(proc.stdout)
    places = {(Path(p["file"]).name, p["function"]) for p in flows["locations"]}
    assert ("pricing.py", "calculate_total") in places
    assert ("orders.py", "create_order_response") in places
    assert any(o["call"].endswith("write") for o in flows["outputs"])
    # Negative control: the currency never touches the promotions read.
    currency = _cli(store, keys, "flows", "--from", "payload['currency']@app.py:24", "--json")
    assert currency.returncode == 0, currency.stderr.decode()
    reached = {Path(p["file"]).name for p in json.loads(currency.stdout)["locations"]}
    assert "pricing.py" not in reached and "promotions.py" not in reached


def test_inspect_stack_shows_locals_with_their_steps(story: tuple[Path, KeyFiles]) -> None:
    store, keys = story
    total_line = _line(APP / "services" / "pricing.py", "return round(total, 2)")
    proc = _cli(store, keys, "inspect-stack", "--at", f"services/pricing.py:{total_line}", "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    frames = json.loads(proc.stdout)["frames"]
    assert [f["function"] for f in frames[:2]] == ["calculate_total", "main"]
    local = {v["name"]: v for v in frames[0]["locals"]}
    assert local["subtotal"]["value"]["repr"] == "49.99" and local["subtotal"]["tag"] > 0
    assert local["discount"]["value"]["repr"] == "1.0"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("trace", "--at", "app.py:999", "--var", "x"), 2, "never reached"),
        (("trace", "--at", "nowhere.py:3", "--var", "x"), 2, "not a recorded source file"),
        (("trace", "--at", "crash", "--var", "x"), 2, "did not crash"),
        (("trace", "--at", "app.py", "--var", "x"), 2, "expected FILE:LINE"),
        (("trace", "--at", "routes/orders.py:4", "--var", "order.nope"), 2, "no attribute"),
        (("trace", "--at", "routes/orders.py:4", "--var", "1 +"), 2, "not a name"),
        (("trace", "--at", "routes/orders.py:4", "--var", "missing"), 2, "not defined"),
        (("flows", "--from", "event:99999"), 2, "the recording has events"),
        (("flows", "--from", "nonsense"), 2, "expected EXPR@LOCATION"),
    ],
)
def test_bad_questions_get_one_line_and_exit_2(
    story: tuple[Path, KeyFiles], args: tuple[str, ...], code: int, message: str
) -> None:
    store, keys = story
    proc = _cli(store, keys, *args)
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_wrong_key_and_tampered_recording_are_refused(
    story: tuple[Path, KeyFiles], other_keys: KeyFiles, tmp_path: Path
) -> None:
    store, keys = story
    wrong = run_cli(
        "trace", str(store), "--identity", str(other_keys.identity_path),
        "--at", "routes/orders.py:4", "--var", "order.total_price",
    )  # fmt: skip
    assert wrong.returncode == 4, wrong.stderr.decode()
    copy = tmp_path / "tampered"
    shutil.copytree(store, copy)
    segment = next(p for p in sorted(copy.rglob("*")) if p.is_file() and "seg" in p.name)
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 1
    segment.write_bytes(bytes(data))
    tampered = _cli(copy, keys, "trace", "--at", "routes/orders.py:4", "--var", "x")
    assert tampered.returncode == 4, tampered.stderr.decode()
    # Nothing stored was lost: the original still answers.
    assert _trace(store, keys, "routes/orders.py:4", "order.total_price")["root"]


def _serving_processes(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b'"serve"' in cmdline:
            pids.append(int(entry.name))
    return pids


def test_checkpoints_give_the_same_answers_and_end_with_the_command(
    story: tuple[Path, KeyFiles],
) -> None:
    store, keys = story
    plain = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    # An interval no other test uses marks this command's checkpoint processes.
    every = "4999"
    proc = _cli(
        store, keys, "trace", "--at", "routes/orders.py:4", "--var", "order.total_price",
        "--depth", "12", "--checkpoint-every", every, "--max-checkpoints", "4", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    checkpointed = json.loads(proc.stdout)
    assert checkpointed["root"] == plain["root"]
    assert checkpointed["query"]["stopped_at"] == plain["query"]["stopped_at"]
    assert _serving_processes(f'"interval": {every}') == []


def test_a_session_answers_later_passes_from_the_nearest_checkpoint(
    story: tuple[Path, KeyFiles],
) -> None:
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._checkpoints import CheckpointPolicy
    from sealtrace.sandbox._replay_process import load_recording

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    plain = Inquiry(data, parsed)
    doc = plain.trace(Trace(at="routes/orders.py:4", var="order.total_price", depth=3))
    root = doc["root"]["counter"]
    with Inquiry(data, parsed, checkpoints=CheckpointPolicy(7001, 8, budget=0.0)) as session:
        survey = session.survey()
        server = session._checkpointed()
        assert 2 <= len(server.checkpoints) <= 9
        assert server.nearest(root) is not None and server.nearest(root) <= root
        assert session.capture({root})[root] == plain.capture({root})[root]
        assert survey["instructions"] == plain.survey()["instructions"]
    assert _serving_processes('"interval": 7001') == []


def _same_answer(plain: dict[str, Any], boxed: dict[str, Any]) -> None:
    """Sandboxed and in-process nodes agree; only strings the agent cannot match differ."""
    assert boxed["counter"] == plain["counter"]
    assert boxed["line"] == plain["line"]
    assert boxed["origin"] == plain["origin"]
    if boxed["file"]:
        assert boxed["file"] == plain["file"]
        assert boxed["function"] == plain["function"]
    else:
        assert not plain["file"].startswith(str(APP))  # only library files are unnamed
    if "?" not in boxed["op"]:
        assert boxed["op"] == plain["op"]
    assert boxed["value"]["type"] in (plain["value"]["type"], "?")
    if boxed["value"]["repr"] is not None:
        assert boxed["value"]["repr"] == plain["value"]["repr"]
    assert len(boxed["inputs"]) == len(plain["inputs"])
    for b, p in zip(boxed["inputs"], plain["inputs"], strict=True):
        _same_answer(p, b)


def test_the_runner_speaks_only_frames_and_agrees_with_in_process(
    story: tuple[Path, KeyFiles],
) -> None:
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._replay_process import load_recording

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    plain = Inquiry(data, parsed).trace(
        Trace(at="routes/orders.py:4", var="order.total_price", depth=12)
    )
    with SandboxClient(data, parsed, checkpoint_every=20_000) as box:
        received: list[bytes] = []
        feed = box.reader.feed
        box.reader.feed = lambda data: received.append(data) or feed(data)  # type: ignore[method-assign]
        boxed = box.trace(Trace(at="routes/orders.py:4", var="order.total_price", depth=12))
        stats = box.stats()
    _same_answer(plain["root"], boxed["root"])
    assert boxed["query"]["stopped_at"] == plain["query"]["stopped_at"]
    assert (
        boxed["query"]["value"]["repr"] == "0.0" and boxed["query"]["slot"] == "order.total_price"
    )
    # The story's strings crossed only as digests, and the agent matched them.
    wire = b"".join(received)
    assert len(wire) % 88 == 0
    for secret in (b"STAFF100", b"promotions.db", b"total_price", b"MUG-01"):
        assert secret not in wire
    read = _find(boxed["root"], origin=lambda n: _call(n) == "sqlite3.Cursor.fetchone")
    assert read["value"]["repr"] == "(100,)"
    assert stats["instructions"] > 90_000 and stats["depth_mismatches"] == 0


def test_sandboxed_flows_and_stack_agree_with_in_process(story: tuple[Path, KeyFiles]) -> None:
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._replay_process import load_recording

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    plain = Inquiry(data, parsed)
    line = _line(APP / "services" / "pricing.py", "return round(total, 2)")
    at = f"services/pricing.py:{line}"
    stack = plain.inspect_stack(InspectStack(at=at))
    event = next(i for i, e in enumerate(parsed.events) if e.callee == "sqlite3.Cursor.fetchone")
    flows = plain.flows(Flows(source=f"event:{event}"))
    with SandboxClient(data, parsed) as box:
        boxed_stack = box.inspect_stack(InspectStack(at=at))
        boxed_flows = box.flows(Flows(source=f"event:{event}"))
    assert boxed_stack["query"]["counter"] == stack["query"]["counter"]
    app_frames = [f for f in stack["frames"] if f["file"].startswith(str(APP))]
    boxed_app = [f for f in boxed_stack["frames"] if f["file"].startswith(str(APP))]
    assert len(boxed_app) == len(app_frames) >= 2
    for plain_frame, boxed_frame in zip(app_frames, boxed_app, strict=True):
        assert boxed_frame["function"] == plain_frame["function"]
        assert boxed_frame["line"] == plain_frame["line"]
        names = [v["name"] for v in plain_frame["locals"]]
        assert [v["name"] for v in boxed_frame["locals"]] == names
        for p, b in zip(plain_frame["locals"], boxed_frame["locals"], strict=True):
            assert b["tag"] == p["tag"]
            if b["value"]["repr"] is not None:
                assert b["value"]["repr"] == p["value"]["repr"]
    assert [(p["line"], p["counter"], p["count"]) for p in boxed_flows["locations"]] == [
        (p["line"], p["counter"], p["count"]) for p in flows["locations"]
    ]
    assert boxed_flows["outputs"] == flows["outputs"]


@pytest.mark.podman
def test_the_story_in_a_hardened_rootless_container(
    story: tuple[Path, KeyFiles], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    from sealtrace.agent._podman import PodmanTransport
    from sealtrace.agent._sandbox_client import SandboxClient
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._replay_process import load_recording

    client, user, _socket = podman_service
    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    plain = Inquiry(data, parsed).trace(
        Trace(at="routes/orders.py:4", var="order.total_price", depth=12)
    )
    transport = PodmanTransport(client, replay_image, uid=user.pw_uid, gid=user.pw_gid)
    with SandboxClient(data, parsed, transport, timeout=120) as box:
        info = transport.inspect()
        boxed = box.trace(Trace(at="routes/orders.py:4", var="order.total_price", depth=12))
    _same_answer(plain["root"], boxed["root"])
    host = info["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    # No variable of the agent's, nor PATH/TERM/container: only what the runtime sets.
    assert {item.split("=", 1)[0] for item in info["Config"]["Env"]} <= {"HOSTNAME", "HOME"}
    assert host["NetworkMode"] == "none"
    assert "no-new-privileges" in host["SecurityOpt"]
    # Podman lists the default capabilities it dropped; nothing is added back (a replayed
    # program reads CapEff 0 from inside: test_hostile_program.py).
    assert {"CAP_CHOWN", "CAP_NET_RAW", "CAP_SETUID", "CAP_KILL"} <= set(host["CapDrop"])
    assert not host.get("CapAdd")
    limits = {u["Name"]: u["Hard"] for u in host["Ulimits"]}
    assert limits["RLIMIT_NPROC"] == 256 and limits["RLIMIT_NOFILE"] == 1024
    assert limits["RLIMIT_AS"] == 4 << 30
    mounts = {m["Destination"]: m for m in info["Mounts"]}
    assert set(mounts) == {"/pipes"} and mounts["/pipes"]["RW"] is False
    assert f"size={(64 << 20) + transport.image_tmp_bytes}" in host["Tmpfs"]["/tmp"]
    assert not transport.directory.exists()  # the pipes went with the session
    assert transport.directory.parent == Path("/dev/shm")  # and lived on a tmpfs
    assert not [c for c in client.containers.list(all=True) if c.id == info["Id"]]


@pytest.mark.podman
def test_the_commands_answer_from_the_sandbox(
    story: tuple[Path, KeyFiles], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    _client, _user, socket_url = podman_service
    store, keys = story
    env = {"SEALTRACE_PODMAN_SOCKET": socket_url}
    built = run_cli("sandbox", "build-image", "--json", env=env)
    assert built.returncode == 0, built.stderr.decode()
    assert json.loads(built.stdout)["image"] == replay_image  # already built: found, not rebuilt
    base = [str(store), "--identity", str(keys.identity_path), "--sandbox"]
    plain = _trace(store, keys, "routes/orders.py:4", "order.total_price")
    boxed = run_cli(
        "trace", *base, "--at", "routes/orders.py:4", "--var", "order.total_price", "--depth",
        "12", "--json", env=env,
    )  # fmt: skip
    assert boxed.returncode == 0, boxed.stderr.decode()
    _same_answer(plain["root"], json.loads(boxed.stdout)["root"])
    event = _find(plain["root"], origin=lambda n: _call(n) == "sqlite3.Cursor.fetchone")
    flows = run_cli("flows", *base, "--from", f"event:{event['origin']['event']}", env=env)
    assert flows.returncode == 0 and b"calculate_total" in flows.stdout, flows.stderr.decode()
    stack = run_cli("inspect-stack", *base, "--at", "end", "--json", env=env)
    assert stack.returncode == 0, stack.stderr.decode()
    assert json.loads(stack.stdout)["frames"][0]["function"] == "<module>"
    nowhere = run_cli("trace", *base, "--at", "end", "--var", "main",
                      env={"SEALTRACE_PODMAN_SOCKET": "unix:///nonexistent.sock"})  # fmt: skip
    assert nowhere.returncode == 5 and b"no rootless Podman service" in nowhere.stderr


def test_a_serve_pass_that_sends_more_than_the_control_socket_holds(
    story: tuple[Path, KeyFiles],
) -> None:
    """A long run at a short interval sends hundreds of messages (each checkpoint, then the
    ones thinning drops): the session takes them as they come, or the serve pass blocks on a
    full control socket while the session waits for it to end (a served Flask request in a
    session, checkpointed every 10,000 instructions, went silent that way)."""
    from sealtrace.sandbox import Inquiry
    from sealtrace.sandbox._checkpoints import CheckpointPolicy
    from sealtrace.sandbox._replay_process import load_recording

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    plain = Inquiry(data, parsed)
    doc = plain.trace(Trace(at="routes/orders.py:4", var="order.total_price", depth=3))
    root = doc["root"]["counter"]
    with Inquiry(
        data, parsed, checkpoints=CheckpointPolicy(3, 64, budget=0.0), timeout=60
    ) as session:
        survey = session.survey()
        server = session._checkpointed()
        assert survey["instructions"] > 3 * 64 * 2**6  # thinned at least six times
        assert 32 <= len(server.checkpoints) <= 65
        assert session.capture({root})[root] == plain.capture({root})[root]
    assert _serving_processes('"interval": 3,') == []


def test_a_pass_that_never_ends_is_killed_at_its_timeout(story: tuple[Path, KeyFiles]) -> None:
    """A serve pass whose control socket nobody reads blocks for good; the pass's timeout
    kills it (the receipt is read beside the wait, not before it)."""
    import socket
    import time

    from sealtrace.sandbox._errors import ReplayCrashedError
    from sealtrace.sandbox._replay_process import load_recording, replay

    store, keys = story
    data, parsed = load_recording(str(store), keys.identity)
    unread, theirs = socket.socketpair()
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
    query = {"kind": "serve", "control_fd": theirs.fileno(), "interval": 1, "cap": 64}
    started = time.monotonic()
    try:
        with pytest.raises(ReplayCrashedError, match="did not finish within 5s"):
            replay(data, parsed.meta, timeout=5, query=query, pass_fds=(theirs.fileno(),))
    finally:
        unread.close()
        theirs.close()
    assert time.monotonic() - started < 30
