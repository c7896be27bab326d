"""The £0.00 story through an ORM-backed web request (issue 22, acceptance): a Flask app with
SQLAlchemy, served by werkzeug on a real listening socket, answers a request that another
process sends; the promotions table holds the staff test code STAFF100 (100 %), so the
order's total is £0.00. The total, traced with the default bound, reaches the promotions
read (the sqlite3 fetch under SQLAlchemy's ORM), in-process and in the sandbox, with the
same chain: the same nodes, operations, lines, values and origins, in the same tree.

Step numbers are each replaying process's own. A program whose order depends on object
addresses (SQLAlchemy fills an instance's columns in the order of a set of objects) may run
one loop's iterations in another order in a container than on this host, so a step inside it
can carry another number there; what it computed, from what, does not change.

The recorder does not follow threads yet, so the server handles its one request on the main
thread (`threaded=False`, `handle_request()`); the client is this test, unrecorded.
"""

from __future__ import annotations

import copy
import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..conftest import KeyFiles, run_cli
from .replaying import line_of, promotions_database, recorded_server, write_app

# Alone: with two other workers loading the machine, a sandboxed session's trace was refused
# (its passes disagreed at step 3,579,174, the request's LimitedStream: one pass ran a
# finalizer twelve instructions earlier). The cause, a capture's description moving the
# program's collections, is closed (docs/provenance.md, "Found: the passes that ran a
# finalizer twelve steps apart"); the test stays by itself until parallel runs show it.
pytestmark = pytest.mark.alone

SHOP = """
import sys

from flask import Flask, jsonify, request
from sqlalchemy import Float, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from werkzeug.serving import make_server


class Base(DeclarativeBase):
    pass


class Promo(Base):
    __tablename__ = "promotions"
    code: Mapped[str] = mapped_column(String, primary_key=True)
    discount_pct: Mapped[float] = mapped_column(Float)


engine = create_engine(f"sqlite:///{sys.argv[1]}")
app = Flask(__name__)


def discount_for(code):
    with Session(engine) as s:
        promo = s.scalars(select(Promo).where(Promo.code == code)).first()
        return promo.discount_pct if promo else 0.0


def price(subtotal, code):
    pct = discount_for(code)
    discount = pct / 100
    total = subtotal * (1 - discount)
    return round(total, 2)


@app.post("/orders")
def create_order():
    body = request.get_json()
    subtotal = sum(item["price"] * item["qty"] for item in body["items"])
    total = price(subtotal, body.get("promo"))
    return jsonify({"total": total})


server = make_server("127.0.0.1", 0, app, threaded=False)
print(server.server_port, flush=True)  # the client, another process, connects here
server.handle_request()
server.server_close()
"""
ORDER = {"items": [{"price": 49.99, "qty": 1}], "promo": "STAFF100"}
READ = "sqlite3.Cursor.fetchall"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, KeyFiles, str]:
    from sealtrace.proxy import write_keypair

    work = tmp_path_factory.mktemp("served")
    keys = KeyFiles(*write_keypair(work / "keys", "served"))
    database = promotions_database(work / "shop.db")
    app = write_app(work / "shop", SHOP)
    command = [sys.executable, str(app), str(database)]
    with recorded_server(keys, work / "store", command) as (recorder, port):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/orders",
            data=json.dumps(ORDER).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:  # noqa: S310 - loopback
            assert json.loads(reply.read()) == {"total": 0.0}
        _out, err = recorder.communicate(timeout=120)
    assert recorder.returncode == 0, err.decode()
    assert b'"POST /orders HTTP/1.1" 200' in err  # werkzeug's request log
    database.unlink()  # the replay needs neither the database nor the client
    return work / "store", keys, f"app.py:{line_of(SHOP, 'return round(total')}"


def _shown(node: dict[str, Any], path: tuple[int, ...] = ()) -> Iterator[tuple[tuple, dict]]:
    here = (*path, node["counter"])
    yield here, node
    for child in node["inputs"]:
        yield from _shown(child, here)


def _read(doc: dict[str, Any]) -> dict[str, Any]:
    reads = [n for _, n in _shown(doc["root"]) if (n["origin"] or {}).get("call") == READ]
    assert reads, "the total does not reach the promotions read"
    return reads[0]


def _trace(store: Path, keys: KeyFiles, at: str, *where: str, env: Any = None) -> dict[str, Any]:
    proc = run_cli(
        "trace", str(store), "--identity", str(keys.identity_path), *where,
        "--at", at, "--var", "total", "--json", env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _same_node(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """`theirs` (the sandbox's) is `mine` (in-process), up to what the agent cannot name: a
    library file, a callee or a value it could not match is unnamed there."""
    if (theirs["line"], theirs["origin"]) != (mine["line"], mine["origin"]):
        return False
    op, unnamed = theirs["op"], theirs["op"].endswith(" ?")
    if op != mine["op"] and not (unnamed and mine["op"].startswith(op[:-1])):
        return False
    if theirs["file"] not in (mine["file"], None, ""):
        return False
    if theirs["value"]["repr"] not in (mine["value"]["repr"], None):
        return False
    return _same_inputs(mine["inputs"], theirs["inputs"])


def _same_inputs(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    left = list(mine)
    for node in theirs:
        match = next((i for i, other in enumerate(left) if _same_node(other, node)), None)
        if match is None:
            return False
        del left[match]
    return not left


def _same_chain(plain: dict[str, Any], boxed: dict[str, Any]) -> None:
    assert _same_node(plain["root"], boxed["root"])
    assert boxed["query"]["truncated"] == plain["query"]["truncated"]


def test_the_total_reaches_the_promotions_read_in_process(
    served: tuple[Path, KeyFiles, str],
) -> None:
    store, keys, at = served
    doc = _trace(store, keys, at, "--in-process")
    assert doc["query"]["depth"] == 64  # the default bound
    assert doc["root"]["value"]["repr"] == "0.0"
    read = _read(doc)
    assert read["value"]["repr"] == "[('STAFF100', 100.0)]"
    # The request reached the program through a real socket: the server accepted it.
    calls = {n["origin"]["call"] for _, n in _shown(doc["root"]) if (n["origin"] or {}).get("call")}
    assert "socket.accept" in calls


@pytest.mark.podman
def test_the_sandbox_reaches_the_same_reads(
    served: tuple[Path, KeyFiles, str], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    """The origins the chains name, in-process and in a session container: the promotions
    read, and the socket reads that brought the request in."""
    store, keys, at = served
    plain = _trace(store, keys, at, "--in-process")
    boxed = _trace(store, keys, at, env={"SEALTRACE_PODMAN_SOCKET": podman_service[2]})

    def origins(doc: dict[str, Any]) -> set[tuple[str, Any]]:
        return {
            (n["origin"]["call"], n["origin"]["event"])
            for _, n in _shown(doc["root"])
            if (n["origin"] or {}).get("call")
        }

    assert origins(boxed) == origins(plain)
    assert _read(boxed)["origin"] == _read(plain)["origin"]
    assert boxed["query"]["truncated"] is plain["query"]["truncated"] is False


@pytest.mark.podman
def test_the_sandbox_gives_the_same_chain(
    served: tuple[Path, KeyFiles, str], podman_service: tuple[Any, Any, str], replay_image: str
) -> None:
    store, keys, at = served
    plain = _trace(store, keys, at, "--in-process")
    boxed = _trace(store, keys, at, env={"SEALTRACE_PODMAN_SOCKET": podman_service[2]})
    _same_chain(plain, boxed)
    assert _read(boxed)["origin"] == _read(plain)["origin"]
    # Negative controls: another event behind the read, or a lost input, is another chain.
    moved = copy.deepcopy(boxed)
    _read(moved)["origin"]["event"] += 1
    assert not _same_node(plain["root"], moved["root"])
    cut = copy.deepcopy(boxed)
    next(n for _, n in _shown(cut["root"]) if len(n["inputs"]) > 1)["inputs"].pop()
    assert not _same_node(plain["root"], cut["root"])
