"""The ground-truth corpus: ordinary programs, each with the exact origins of one value.

Each program in programs/<name>/ is small and written as a user would write it: it reads
real inputs (SQLite databases, CSV, JSON and text files, environment variables, its command
line, sockets, an HTTP request through Flask, rows through SQLAlchemy's ORM) and passes them
through one or more Python idioms (C reductions and conversions, in-place operators,
collections, dataclasses and descriptors, copies, objects filled by reads, logging,
comprehensions, generators, closures, class hierarchies, exceptions). Its entry below names
those idioms, the expression traced at the line marked `# <- trace`, and the truth
(sealtrace.sandbox.validation.truth): the origins the value's full backward slice must
name, the real ancestors it may name, and the decoys it must not.

The truth is written from what the program does, never from what the engine answers: it is
the measuring instrument for the engine, and an answer the engine gets wrong today is a
miss or a false positive here, not a reason to change the truth.

A program marked `control` is a negative control: its value depends on no input at all
(only on named constants), although inputs are read into the same containers and objects.
It holds when its answer is complete (no branch cut by depth, nothing unknown) and names no
input.

Every program is traced with the same generous depth (DEPTH, the question contract's
largest), so that the slice reaches every origin if the engine can follow it.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..questions import MAX_DEPTH
from .cases import PROGRAMS, TRACE, marked_line
from .inputs import (
    Inputs,
    database,
    free_port,
    http_post,
    lines_client,
    listening,
    write_json,
)
from .truth import Flow, Truth, argv, constant, env, external, line, output

__all__ = ["CORPUS", "DEPTH", "IDIOMS", "Program"]

DEPTH = MAX_DEPTH

# Every idiom the corpus covers, and what it means (issue 22's list, and the program shapes).
IDIOMS: dict[str, str] = {
    "sum": "sum() over a container or a generator",
    "min-max": "min() and max() of a list",
    "sorted": "sorted() and an item of its result",
    "join": "str.join() of a list",
    "any-all": "any() and all() over generator expressions",
    "fsum": "math.fsum() of a list",
    "statistics": "the statistics module",
    "conversion": "list(), tuple() and dict() of iterables",
    "json-dumps": "json.dumps() of a container",
    "format": "str.format() and f-strings of containers",
    "comprehension": "list, dict and set comprehensions",
    "generator": "generator functions and expressions",
    "buffered-io": "buffered and text file reads (readline, iteration)",
    "augmented-item": "in-place operators on items: d[k] += v",
    "augmented-attr": "in-place operators on attributes: obj.x *= y",
    "missing": "__missing__ (a dict subclass's, defaultdict's)",
    "setdefault": "dict.setdefault",
    "defaultdict": "collections.defaultdict",
    "counter": "collections.Counter",
    "deque": "collections.deque",
    "ordereddict": "collections.OrderedDict",
    "class": "classes: methods, attributes, hierarchies, super()",
    "dataclass": "dataclasses: generated __init__, replace(), asdict()",
    "instance-dict": "writes into __dict__ from C: update(), setattr()",
    "slots": "__slots__ attributes written by setattr()",
    "descriptor": "data descriptors and properties",
    "copy": "copy.copy() and copy.deepcopy()",
    "sqlite-row": "sqlite3 rows: sqlite3.Row, dict(row), row factories, cursors",
    "decoder": "decoders: struct, base64, zlib, codecs, json",
    "csv": "csv.reader and csv.DictReader",
    "csv-pipeline": "a CSV export read, filtered and aggregated",
    "json-pipeline": "JSON documents and JSON lines read and aggregated",
    "socket": "a socket's replies read through makefile()",
    "asyncio": "asyncio programs: coroutines driven by asyncio.run",
    "asyncio-stream": "asyncio StreamReader data filled by the event loop",
    "orm": "SQLAlchemy ORM: mapped attributes set from rows and by instrumented writes",
    "web": "a request through Flask on a real server socket",
    "logging": "records through logging: formatters, handlers, adapters",
    "closure": "closures: captured variables and nonlocal state",
    "exception": "values through except clauses and exception attributes",
    "control": "negative controls: values made only from constants, beside inputs",
}


@dataclass(frozen=True)
class Program:
    name: str
    idioms: tuple[str, ...]
    story: str
    make_inputs: Callable[[Path], Inputs]
    trace: str
    truth: Truth
    control: bool = False
    script: str = "app.py"
    flows: Flow | None = None  # the forward truth, for programs whose outputs matter

    @property
    def program(self) -> Path:
        return PROGRAMS / self.name

    def trace_line(self, root: Path | None = None) -> int:
        return marked_line((root or self.program) / self.script, TRACE)


# -- C reductions and conversions ---------------------------------------------------------


def _sum_appended(d: Path) -> Inputs:
    database(
        d / "billing.db",
        "create table lines (invoice text, qty int, unit_cents int)",
        "insert into lines values (?, ?, ?)",
        [("INV-7", 2, 1250), ("INV-7", 1, 4999), ("INV-8", 5, 300)],
    )
    (d / "credits.csv").write_text("note,cents\nCN-1,500\nCN-2,120\n")
    return Inputs(("billing.db", "credits.csv", "INV-7"), {"INVOICE_CURRENCY": "NOK"})


def _min_max_spread(d: Path) -> Inputs:
    database(
        d / "sensors.db",
        "create table readings (room text, celsius real, taken text)",
        "insert into readings values (?, ?, ?)",
        [
            ("nursery", 22.0, "08:00"),
            ("nursery", 24.5, "09:00"),
            ("lab", 19.25, "09:00"),
            ("office", 31.0, "09:00"),
        ],
    )
    write_json(d / "humidity.json", {"relative": 0.61})
    return Inputs(("sensors.db", "humidity.json"), {"OUTDOOR_CELSIUS": "8.5"})


def _sorted_median(d: Path) -> Inputs:
    (d / "deliveries.txt").write_text("D1;34.0\nD2;12.5\nD3;58.0\nD4;41.0\n\n")
    (d / "cancelled.txt").write_text("D9 D11\n")
    return Inputs(("deliveries.txt", "cancelled.txt"), {"REPORT_TZ": "Europe/Oslo"})


def _join_label(d: Path) -> Inputs:
    database(
        d / "customers.db",
        "create table customers (id text, name text)",
        "insert into customers values (?, ?)",
        [("17", "Ada Byre"), ("18", "Tom Lie")],
    )
    write_json(d / "book.json", {"street": "Storgata 1", "phone": "+47 555 01 234"})
    env = {"DELIVERY_CITY": "Oslo", "SENDER": "Fjord Tea AS", "LABEL_PRINTER": "zebra-2"}
    return Inputs(("customers.db", "book.json", "17"), env)


def _any_all_review(d: Path) -> Inputs:
    database(
        d / "payments.db",
        "create table payments (cents int)",
        "insert into payments values (?)",
        [(1200,), (800,), (450,)],
    )
    (d / "settlements.csv").write_text(
        "id,date,status\n1,2024-05-01,settled\n2,2024-05-02,settled\n"
    )
    write_json(d / "merchant.json", {"name": "Kaffebrenneriet"})
    env = {"REVIEW_LIMIT_CENTS": "5000", "REVIEWER": "ops-2"}
    return Inputs(("payments.db", "settlements.csv", "merchant.json"), env)


def _fsum_timesheet(d: Path) -> Inputs:
    (d / "timesheet.txt").write_text("mon;7.5\ntue;8.0\nwed;6.25\n")
    (d / "overtime.txt").write_text("2.0 1.5\n")
    return Inputs(("timesheet.txt", "overtime.txt"), {"HOURLY_RATE": "21.40"})


def _statistics_summary(d: Path) -> Inputs:
    db = d / "deliveries.db"
    database(
        db,
        "create table deliveries (depot text, minutes int)",
        "insert into deliveries values (?, ?)",
        [("OSL", 30), ("OSL", 45), ("OSL", 21), ("BGO", 60)],
    )
    database(
        db, "create table cancelled (id int)", "insert into cancelled values (?)", [(1,), (2,)]
    )
    return Inputs(("deliveries.db", "OSL"), {"SLA_TARGET_MINUTES": "40"})


def _conversions(d: Path) -> Inputs:
    (d / "prices.csv").write_text("sku,cents\nlamp,4900\ndesk,25900\n")
    write_json(d / "order.json", {"lines": [["lamp", 2], ["desk", 1]]})
    (d / "stock.csv").write_text("sku,on_hand\nlamp,12\ndesk,3\n")
    return Inputs(("prices.csv", "order.json", "stock.csv"))


def _json_dumps_payload(d: Path) -> Inputs:
    database(
        d / "orders.db",
        "create table orders (id text, amount_cents int)",
        "insert into orders values (?, ?)",
        [("A-1001", 12990), ("A-1002", 500)],
    )
    write_json(d / "settings.json", {"endpoint": "https://hooks.example/shop"})
    return Inputs(("orders.db", "A-1001", "settings.json"), {"WEBHOOK_SECRET": "s3cr3t"})


def _format_basket(d: Path) -> Inputs:
    database(
        d / "shop.db",
        "create table items (basket text, pos int, name text)",
        "insert into items values (?, ?, ?)",
        [("B-9", 1, "kettle"), ("B-9", 2, "green tea"), ("B-7", 1, "mug")],
    )
    write_json(d / "hours.json", {"mon": "08-16"})
    env = {"STORE_ID": "oslo-3", "CUSTOMER_NAME": "Ines"}
    return Inputs(("shop.db", "hours.json", "B-9"), env)


def _fstring_totals(d: Path) -> Inputs:
    (d / "takings.csv").write_text("method,cents\ncard,1200\ncash,550\ncard,300\n")
    (d / "refunds.csv").write_text("method,refund_cents\ncard,200\n")
    return Inputs(("takings.csv", "refunds.csv"), {"TILL_NAME": "till-3"})


# -- in-place operators and collections -------------------------------------------------------


def _sales(d: Path, rows: list[tuple[int, str, float]]) -> None:
    database(
        d / "sales.db",
        "create table sales (id int, region text, amount real)",
        "insert into sales values (?, ?, ?)",
        rows,
    )


def _augmented_item(d: Path) -> Inputs:
    _sales(d, [(1, "north", 120), (2, "south", 75), (3, "north", 30)])
    write_json(d / "regions.json", {"regions": ["north", "south"]})
    return Inputs(("sales.db", "regions.json"))


def _augmented_attr(d: Path) -> Inputs:
    database(
        d / "bank.db",
        "create table accounts (number text, balance_cents int)",
        "insert into accounts values (?, ?)",
        [("NO-77", 120000), ("NO-78", 5)],
    )
    write_json(d / "owner.json", {"owner": "R. Diaz"})
    env = {"MONTHLY_RATE": "0.01", "OVERDRAFT_CENTS": "50000"}
    return Inputs(("bank.db", "NO-77", "owner.json"), env)


def _missing_tally(d: Path) -> Inputs:
    database(
        d / "ledger.db",
        "create table transfers (id int, account text, delta int)",
        "insert into transfers values (?, ?, ?)",
        [(1, "acme", 50), (2, "globex", -20), (3, "acme", -5)],
    )
    return Inputs(("ledger.db",), {"LEDGER_NAME": "May ledger"})


def _setdefault_groups(d: Path) -> Inputs:
    database(
        d / "hours.db",
        "create table timesheets (id int, team text, hours real)",
        "insert into timesheets values (?, ?, ?)",
        [(1, "ops", 7.5), (2, "dev", 8.0), (3, "ops", 6.0)],
    )
    return Inputs(("hours.db",), {"WEEK_LABEL": "2024-W19"})


def _defaultdict_totals(d: Path) -> Inputs:
    _sales(d, [(1, "north", 120.5), (2, "south", 75.25), (3, "north", 30.0)])
    return Inputs(("sales.db",), {"REGION_LABEL": "Nordics"})


def _counter_levels(d: Path) -> Inputs:
    (d / "app.log").write_text(
        "2024-05-01T10:00 INFO app-start\n"
        "2024-05-01T10:01 ERROR db-timeout\n"
        "2024-05-01T10:02 WARN slow-query\n"
        "2024-05-01T10:03 ERROR retry-failed\n"
    )
    (d / "access.log").write_text("2024-05-01T10:00 WARN GET /slow\n2024-05-01T10:01 INFO GET /\n")
    return Inputs(("app.log", "access.log"), {"SIDECAR_ERRORS": "2"})


def _deque_window(d: Path) -> Inputs:
    database(
        d / "meter.db",
        "create table readings (taken text, kw real)",
        "insert into readings values (?, ?)",
        [
            ("09:01", 5.0),
            ("09:02", 6.0),
            ("09:03", 7.0),
            ("09:04", 2.5),
            ("09:05", 3.5),
            ("09:06", 4.0),
        ],
    )
    return Inputs(("meter.db",))


def _ordereddict_layers(d: Path) -> Inputs:
    write_json(d / "service.json", {"retries": 5, "timeout": 45})
    return Inputs(("service.json",), {"SERVICE_TIMEOUT": "12"})


# -- objects: dataclasses, __dict__, __slots__, descriptors, copies --------------------------


def _dataclass_replace(d: Path) -> Inputs:
    database(
        d / "prices.db",
        "create table prices (sku text, net real)",
        "insert into prices values (?, ?)",
        [("KB-101", 1999.0), ("MS-220", 249.0)],
    )
    write_json(d / "settings.json", {"currency": "NOK"})
    return Inputs(("prices.db", "settings.json", "KB-101"), {"VAT_RATE": "0.15"})


def _instance_dict_writes(d: Path) -> Inputs:
    db = d / "crm.db"
    database(
        db,
        "create table customers (id text, credit_limit int, tier text)",
        "insert into customers values (?, ?, ?)",
        [("c-7", 9000, "gold"), ("c-8", 100, "basic")],
    )
    database(db, "create table regions (name text)", "insert into regions values (?)", [("north",)])
    write_json(d / "overrides.json", {"limit_boost": 1.5, "theme": "dark"})
    return Inputs(("crm.db", "c-7", "overrides.json"), {"NICKNAME": "rd"})


def _slots_setattr(d: Path) -> Inputs:
    (d / "export.csv").write_text("t-1, C, 21.5\nt-2, C, 19.0\n")
    write_json(d / "units.json", {"C": "celsius", "F": "fahrenheit"})
    return Inputs(("export.csv", "units.json"), {"SITE_NAME": "Bergen lab"})


def _descriptor_money(d: Path) -> Inputs:
    database(
        d / "catalogue.db",
        "create table catalogue (sku text, price real)",
        "insert into catalogue values (?, ?)",
        [("KB-101", 499.9), ("MS-220", 19.99)],
    )
    return Inputs(("catalogue.db", "KB-101", "3"), {"CURRENCY": "EUR", "DISCOUNT": "0.2"})


def _copy_template(d: Path) -> Inputs:
    database(
        d / "orders.db",
        "create table lines (invoice text, sku text, cents int)",
        "insert into lines values (?, ?, ?)",
        [("INV-3", "tent", 129900), ("INV-3", "mat", 19900), ("INV-4", "stove", 5900)],
    )
    write_json(d / "note.json", {"note": "Leave at the door"})
    return Inputs(("orders.db", "INV-3", "note.json"), {"RUSH_SURCHARGE": "1500"})


# -- objects filled by recorded reads: buffers, readers, sockets, streams, rows, decoders ----


def _binary_records(d: Path) -> Inputs:
    records = [(7, 1.5), (9, 2.25), (7, 0.75)]
    body = b"".join(struct.pack("<If", meter, kwh) for meter, kwh in records)
    (d / "dump.bin").write_bytes(b"MTR1" + struct.pack("<I", len(records)) + body)
    write_json(d / "labels.json", {"7": "Flat 7", "9": "Flat 9"})
    return Inputs(("dump.bin", "labels.json", "7"), {"DEVICE_NAME": "meter-hub-2"})


def _csv_reader_totals(d: Path) -> Inputs:
    (d / "sales.csv").write_text("category,amount\nbooks,12.50\ntoys,5.00\nbooks,7.25\n")
    (d / "returns.csv").write_text("category,amount\nbooks,3.00\n")
    return Inputs(("sales.csv", "returns.csv"))


def _csv_dictreader_paid(d: Path) -> Inputs:
    (d / "payments.csv").write_text("id,amount,status\n1,10.50,paid\n2,99.00,void\n3,4.25,paid\n")
    (d / "refunds.csv").write_text("refund_id,amount,status\n9,1.00,paid\n")
    return Inputs(("payments.csv", "refunds.csv"), {"CURRENCY": "GBP"})


def _socket_quote(d: Path) -> Inputs:
    port, peer = listening({b"QUOTE EURNOK": b"EURNOK 11.52\n", b"STATUS": b"OK market-open\n"})
    return Inputs((str(port), "250"), peer=peer)


def _asyncio_client(d: Path) -> Inputs:
    port, peer = listening({b"RATE EUR": b"EUR 11.52\n", b"STATUS": b"OK open\n"})
    return Inputs((str(port), "100"), peer=peer)


def _asyncio_server(d: Path) -> Inputs:
    database(
        d / "catalogue.db",
        "create table catalogue (sku text, cents int)",
        "insert into catalogue values (?, ?)",
        [("KB-101", 49990), ("MS-220", 1999)],
    )
    port = free_port()
    peer = lines_client(port, [b"HELLO v1\n", b"ORDER KB-101 3\n"])
    return Inputs(("catalogue.db", str(port)), peer=peer)


def _sqlite_dict_factory(d: Path) -> Inputs:
    db = d / "orders.db"
    database(
        db,
        "create table lines (order_id text, sku text, price_cents int, qty int)",
        "insert into lines values (?, ?, ?, ?)",
        [("O-1", "tent", 129900, 2), ("O-2", "mat", 19900, 1)],
    )
    database(
        db, "create table warehouses (name text)", "insert into warehouses values (?)", [("OSL",)]
    )
    return Inputs(("orders.db", "O-1"), {"CURRENCY": "NOK"})


def _compressed_json(d: Path) -> Inputs:
    snapshot = json.dumps({"balance_cents": 1234567, "owner": "R. Diaz"}).encode()
    (d / "dump.b64").write_bytes(base64.b64encode(zlib.compress(snapshot)))
    write_json(d / "branch.json", {"branch": "Bergen"})
    return Inputs(("dump.b64", "branch.json"))


def _ndjson_generator(d: Path) -> Inputs:
    events = [
        {"type": "purchase", "customer": "ines", "amount": 120},
        {"type": "view", "customer": "ines", "page": "/tents"},
        {"type": "purchase", "customer": "tom", "amount": 40},
        {"type": "purchase", "customer": "ines", "amount": 15},
    ]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return Inputs(("events.jsonl",), {"FEED_NAME": "shop-events"})


def _incremental_decoder(d: Path) -> Inputs:
    (d / "statement.txt").write_bytes("Kafé Ølstue: 1234,50\n".encode())
    return Inputs(("statement.txt",), {"TERMINAL_ID": "T-88"})


# -- an ORM and a web framework ------------------------------------------------------------


def _shop(d: Path) -> None:
    db = d / "shop.db"
    database(
        db,
        "create table products (sku text primary key, name text, price_pence int)",
        "insert into products values (?, ?, ?)",
        [("MUG-1", "Mug", 4999), ("TEE-2", "Tee", 1500)],
    )
    database(
        db,
        "create table promotions (code text primary key, discount_pct int)",
        "insert into promotions values (?, ?)",
        [("WELCOME10", 10), ("STAFF100", 100)],
    )


def _orm_discount(d: Path) -> Inputs:
    _shop(d)
    return Inputs(("shop.db", "MUG-1", "1", "STAFF100"))


def _customers(d: Path, rows: list[tuple[str, float]]) -> None:
    database(
        d / "crm.db",
        "create table customers (id text primary key, credit_limit real)",
        "insert into customers values (?, ?)",
        rows,
    )


def _orm_attribute_update(d: Path) -> Inputs:
    _customers(d, [("c-1", 5000.0), ("c-2", 800.0)])
    write_json(d / "review.json", {"bonus": 250})
    env = {"REVIEW_FACTOR": "1.1", "REPORT_NAME": "Q2 credit review"}
    return Inputs(("crm.db", "c-1", "review.json"), env)


def _orm_from_csv(d: Path) -> Inputs:
    _customers(d, [("c-1", 5000.0)])
    (d / "export.csv").write_text("id,limit\nc-10,7500\nc-11,300\n")
    return Inputs(("crm.db", "export.csv"), {"IMPORT_BATCH": "2024-05-import"})


def _flask_order(d: Path) -> Inputs:
    _shop(d)
    port = free_port()
    body = json.dumps({"sku": "MUG-1", "qty": 1, "promo": "STAFF100"}).encode()
    peer = http_post(port, "/orders", body, "application/json")
    return Inputs(("shop.db", str(port)), {"STORE_NAME": "Fjord Mugs"}, peer)


def _flask_csv_upload(d: Path) -> Inputs:
    database(
        d / "shop.db", "create table shops (tier text)", "insert into shops values (?)", [("gold",)]
    )
    port = free_port()
    body = b"sku,qty,unit_price\nKB-101,3,499.90\nMS-220,10,19.99\n"
    peer = http_post(port, "/stock", body, "text/csv")
    return Inputs(("shop.db", str(port)), {"SHOP_NAME": "Fjord Tech"}, peer)


# -- logging, comprehensions, generators, closures, classes, exceptions, controls ------------


def _logging_formatter(d: Path) -> Inputs:
    (d / "signups.csv").write_text("email,plan\nines@example.no,pro\n")
    return Inputs(("signups.csv",), {"OPERATOR": "night-shift"})


def _logging_adapter_stream(d: Path) -> Inputs:
    database(
        d / "payments.db",
        "create table payments (id text, cents int)",
        "insert into payments values (?, ?)",
        [("p-1", 4999), ("p-2", 12)],
    )
    env = {"REQUEST_ID": "req-7f3a", "API_TOKEN": "tok-live-123"}
    return Inputs(("payments.db", "p-1"), env)


def _comprehension_nested(d: Path) -> Inputs:
    database(
        d / "catalogue.db",
        "create table catalogue (sku text, cents int)",
        "insert into catalogue values (?, ?)",
        [("lamp", 4900), ("desk", 25900), ("chair", 8900)],
    )
    lines = [{"sku": "lamp", "qty": 2}, {"sku": "desk", "qty": 1}, {"sku": "chair", "qty": 0}]
    write_json(d / "order.json", {"lines": lines})
    return Inputs(("catalogue.db", "order.json"), {"SALES_CHANNEL": "web"})


def _generator_running_total(d: Path) -> Inputs:
    (d / "monday.txt").write_text("12\n8\n")
    (d / "tuesday.txt").write_text("5\n")
    (d / "archive.txt").write_text("900\n100\n")
    return Inputs(("monday.txt", "tuesday.txt", "archive.txt"))


def _closure_tally(d: Path) -> Inputs:
    database(
        d / "till.db",
        "create table takings (currency text, amount real)",
        "insert into takings values (?, ?)",
        [("EUR", 10.0), ("USD", 99.0), ("EUR", 2.5)],
    )
    return Inputs(("till.db",), {"EUR_NOK": "11.5", "EUR_SEK": "11.2"})


def _class_hierarchy_fees(d: Path) -> Inputs:
    database(
        d / "parcels.db",
        "create table parcels (id text, kg real)",
        "insert into parcels values (?, ?)",
        [("P-1", 4.0), ("P-2", 20.0)],
    )
    return Inputs(("parcels.db", "P-1"))


def _exception_fallback(d: Path) -> Inputs:
    database(
        d / "orders.db",
        "create table orders (id text, cents int)",
        "insert into orders values (?, ?)",
        [("o-1", 90000), ("o-2", 100)],
    )
    return Inputs(("orders.db", "o-1"), {"FEE_RATE": "five percent", "CARD_LIMIT": "50000"})


def _logging_pii_flows(d: Path) -> Inputs:
    (d / "signups.csv").write_text("email,plan\nines@example.no,pro\ntom@example.no,free\n")
    return Inputs(("signups.csv", "signups.log"), {"OPERATOR": "night-shift"})


def _control_layout(d: Path) -> Inputs:
    database(
        d / "lines.db",
        "create table lines (sku text, name text, qty int, price int)",
        "insert into lines values (?, ?, ?, ?)",
        [("KB-101", "Keyboard", 2, 49990)],
    )
    write_json(d / "footer.json", {"footer": "Printed by the night job"})
    return Inputs(("lines.db", "footer.json"), {"REPORT_TITLE": "Open orders"})


def _control_policy(d: Path) -> Inputs:
    database(
        d / "accounts.db",
        "create table accounts (balance int)",
        "insert into accounts values (?)",
        [(-12000,)],
    )
    return Inputs(("accounts.db",), {"ACCOUNT_OWNER": "R. Diaz"})


CORPUS: tuple[Program, ...] = (
    Program(
        "sum_appended",
        ("sum",),
        "an invoice total: row amounts appended to a list in a loop, then sum()",
        _sum_appended,
        'invoice["total_cents"]',
        Truth(
            origins=(external("lines", "4999"),),
            allowed=(external("db"), external("lines"), constant("sql"), argv(1), argv(3)),
            decoys=(line("currency"), line("credits-file"), line("credits"), argv(2)),
        ),
    ),
    Program(
        "min_max_spread",
        ("min-max",),
        "a spread: max() minus min() of readings from a database and the environment",
        _min_max_spread,
        'report["spread"]',
        Truth(
            origins=(
                external("reading", "'nursery'", call="fetchone"),
                external("reading", "'lab'", call="fetchone"),
                env("outdoor"),
            ),
            allowed=(constant("rooms"), constant("sql"), external("db"), argv(1)),
            decoys=(line("office", "'office'"), line("humidity-file"), line("humidity"), argv(2)),
        ),
    ),
    Program(
        "sorted_median",
        ("sorted", "comprehension"),
        "a median: the middle of sorted() over values parsed from a text file",
        _sorted_median,
        'stats["median"]',
        Truth(
            origins=(external("deliveries", "D2;12.5"),),
            allowed=(external("open"), argv(1), constant("semicolon", "';'")),
            decoys=(line("zone"), line("cancelled-file"), line("cancelled"), argv(2)),
        ),
    ),
    Program(
        "join_label",
        ("join",),
        "a label: str.join() of a database row, a JSON file and an environment variable",
        _join_label,
        'job["label"]',
        Truth(
            origins=(
                external("name", "Ada Byre", call="fetchone"),
                external("book", "Storgata"),
                env("city"),
            ),
            allowed=(
                external("db"),
                constant("sql"),
                external("book-file"),
                constant("separator"),
                argv(1),
                argv(2),
                argv(3),
            ),
            decoys=(line("sender"), line("printer")),
        ),
    ),
    Program(
        "any_all_review",
        ("any-all", "generator"),
        "a review score: any() and all() over generator expressions of inputs",
        _any_all_review,
        'review["score"]',
        Truth(
            origins=(
                external("payments", "1200"),
                external("statuses", "settled"),
                env("limit"),
                constant("settled"),
            ),
            allowed=(
                external("db"),
                constant("payments-sql"),
                external("statuses-file"),
                constant("comma", "','"),
                argv(1),
                argv(2),
            ),
            decoys=(line("reviewer"), line("merchant-file"), line("merchant"), argv(3)),
        ),
    ),
    Program(
        "fsum_timesheet",
        ("fsum", "buffered-io"),
        "a pay figure: math.fsum() of hours read line by line with readline()",
        _fsum_timesheet,
        'pay["basic"]',
        Truth(
            origins=(external("timesheet", "mon;7.5"), env("rate")),
            allowed=(external("open"), constant("parse"), constant("pence", "2"), argv(1)),
            decoys=(line("overtime-file"), line("overtime"), argv(2)),
        ),
    ),
    Program(
        "statistics_summary",
        ("statistics",),
        "a mean: statistics.mean() of database rows",
        _statistics_summary,
        'summary["mean_minutes"]',
        Truth(
            origins=(external("rows", "45", call="fetchall"),),
            allowed=(external("db"), constant("sql"), argv(1), argv(2)),
            decoys=(line("target"), line("cancelled")),
        ),
    ),
    Program(
        "conversions",
        ("conversion", "sum"),
        "dict() of split lines and of tuple()s, list() of a dict, then a sum over them",
        _conversions,
        'summary["total_cents"]',
        Truth(
            origins=(external("prices", "sku,cents"), external("order", "lines")),
            allowed=(
                external("open"),
                external("order-file"),
                constant("comma", "','"),
                argv(1),
                argv(2),
            ),
            decoys=(line("stock", "on_hand"), argv(3)),
        ),
    ),
    Program(
        "json_dumps_payload",
        ("json-dumps",),
        "a webhook body: json.dumps() of a dictionary of an argument and a database value",
        _json_dumps_payload,
        'request["body"]',
        Truth(
            origins=(argv(2), external("amount", "12990", call="fetchone")),
            allowed=(
                external("db"),
                constant("sql"),
                constant("keys"),
                constant("options"),
                argv(1),
            ),
            decoys=(line("secret"), line("settings-file"), line("settings"), argv(3)),
        ),
    ),
    Program(
        "format_basket",
        ("format",),
        "str.format() of a list filled row by row from a database cursor",
        _format_basket,
        'page["summary"]',
        Truth(
            origins=(
                constant("template"),
                env("customer"),
                external("items", "kettle", call="fetchone"),
                external("items", "green tea", call="fetchone"),
            ),
            allowed=(external("db"), constant("sql"), argv(1), argv(3)),
            decoys=(line("store"), line("hours-file"), line("hours"), argv(2)),
        ),
    ),
    Program(
        "fstring_totals",
        ("format",),
        "an f-string of a dictionary of totals summed with dict.get",
        _fstring_totals,
        'log["line"]',
        Truth(
            origins=(env("till"), external("takings", "cash,550")),
            allowed=(
                external("open"),
                constant("comma", "','"),
                constant("zero", "0"),
                constant("text"),
                argv(1),
            ),
            decoys=(line("refunds", "refund_cents"), argv(2)),
        ),
    ),
    Program(
        "augmented_item",
        ("augmented-item",),
        "totals[region] += amount on a dictionary started at zero",
        _augmented_item,
        'totals["north"]',
        Truth(
            origins=(external("sales", "'north'", call="fetchone"),),
            allowed=(constant("zero", "0"), external("db"), constant("sql"), argv(1)),
            decoys=(line("south", "'south'"), line("regions-file"), line("regions"), argv(2)),
        ),
    ),
    Program(
        "augmented_attr",
        ("augmented-attr", "class"),
        "account.balance *= 1 + rate and -= FEE on an object made from a row",
        _augmented_attr,
        'statement["balance"]',
        Truth(
            origins=(
                external("balance", "120000", call="fetchone"),
                env("rate"),
                constant("fee"),
            ),
            allowed=(external("db"), constant("sql"), constant("one", "1"), argv(1), argv(2)),
            decoys=(line("owner-file"), line("owner"), line("overdraft"), argv(3)),
        ),
    ),
    Program(
        "missing_tally",
        ("missing", "augmented-item", "class"),
        "a dict subclass's __missing__ gives the start value of ledger[account] += delta",
        _missing_tally,
        'report["acme"]',
        Truth(
            origins=(constant("opening"), external("transfers", "'acme'", call="fetchone")),
            allowed=(external("db"), constant("sql"), argv(1)),
            decoys=(line("globex", "'globex'"), line("name")),
        ),
    ),
    Program(
        "setdefault_groups",
        ("setdefault", "sum"),
        "groups.setdefault(team, []).append(hours), then sum() of one group",
        _setdefault_groups,
        'report["ops"]',
        Truth(
            origins=(external("hours", "'ops'", call="fetchone"),),
            allowed=(external("db"), constant("sql"), argv(1)),
            decoys=(line("dev", "'dev'"), line("week")),
        ),
    ),
    Program(
        "defaultdict_totals",
        ("defaultdict", "missing", "augmented-item"),
        "by_region[region] += amount on a defaultdict(float)",
        _defaultdict_totals,
        'report["north"]',
        Truth(
            origins=(external("sales", "'north'", call="fetchone"),),
            allowed=(constant("factory"), external("db"), constant("sql"), argv(1)),
            decoys=(line("south", "'south'"), line("label")),
        ),
    ),
    Program(
        "counter_levels",
        ("counter", "buffered-io", "comprehension"),
        "collections.Counter of values parsed from a file's lines, plus an in-place +=",
        _counter_levels,
        'summary["errors"]',
        Truth(
            origins=(external("app-log", "app-start"), env("sidecar")),
            allowed=(
                external("open"),
                constant("parse", "' '"),
                constant("parse", "2"),
                argv(1),
            ),
            decoys=(line("access-log", "GET /"), argv(2)),
        ),
    ),
    Program(
        "deque_window",
        ("deque", "sum"),
        "the average of a collections.deque(maxlen=N) window over rows",
        _deque_window,
        'load["average_kw"]',
        Truth(
            origins=(
                constant("window"),
                external("readings", "'09:04'", call="fetchone"),
                external("readings", "'09:05'", call="fetchone"),
                external("readings", "'09:06'", call="fetchone"),
            ),
            allowed=(external("db"), constant("sql"), argv(1)),
            decoys=(
                line("early", "'09:01'"),
                line("early", "'09:02'"),
                line("early", "'09:03'"),
            ),
        ),
    ),
    Program(
        "ordereddict_layers",
        ("ordereddict",),
        "an OrderedDict of defaults updated from a file and the environment",
        _ordereddict_layers,
        'plan["budget"]',
        Truth(
            origins=(external("file", "retries"), env("timeout")),
            allowed=(external("open"), argv(1)),
            decoys=(line("defaults"),),
        ),
    ),
    Program(
        "dataclass_replace",
        ("dataclass", "copy"),
        "dataclasses.replace() and asdict() of a dataclass made from a row",
        _dataclass_replace,
        'invoice["gross"]',
        Truth(
            origins=(external("net", "1999.0", call="fetchone"), env("vat")),
            allowed=(
                external("db"),
                constant("sql"),
                constant("arithmetic"),
                argv(1),
                argv(3),
            ),
            decoys=(
                line("default-vat"),
                line("vat-field"),
                line("settings-file"),
                line("settings"),
                argv(2),
            ),
        ),
    ),
    Program(
        "instance_dict_writes",
        ("instance-dict", "sqlite-row"),
        "obj.__dict__.update(dict(sqlite3.Row)) and setattr() in a loop",
        _instance_dict_writes,
        'limits["credit"]',
        Truth(
            origins=(external("credit", "9000", call="fetchone"), external("overrides", "1.5")),
            allowed=(
                external("db"),
                constant("sql"),
                external("overrides-file"),
                argv(1),
                argv(2),
                argv(3),
            ),
            decoys=(line("nickname"), line("region")),
        ),
    ),
    Program(
        "slots_setattr",
        ("slots",),
        "a __slots__ object filled by setattr() over its slot names",
        _slots_setattr,
        'calibrated["value"]',
        Truth(
            origins=(external("export", "t-1"), constant("calibration")),
            allowed=(external("open"), constant("comma", "','"), argv(1)),
            decoys=(line("site"), line("units-file"), line("units"), argv(2)),
        ),
    ),
    Program(
        "descriptor_money",
        ("descriptor", "class"),
        "a data descriptor's __set__/__get__ and a property over a row's price",
        _descriptor_money,
        'order["total"]',
        Truth(
            origins=(external("price", "499.9", call="fetchone"), env("discount"), argv(3)),
            allowed=(
                constant("get", "100"),
                constant("set", "100"),
                constant("one", "1"),
                external("db"),
                constant("sql"),
                argv(1),
                argv(2),
            ),
            decoys=(line("currency"), line("other")),
        ),
    ),
    Program(
        "copy_template",
        ("copy",),
        "copy.deepcopy() of a module template, then copy.copy() and an in-place +=",
        _copy_template,
        'summary["total"]',
        Truth(
            origins=(constant("fee"), external("lines", "tent"), env("surcharge")),
            allowed=(external("db"), constant("sql"), argv(1), argv(2)),
            decoys=(line("note-file"), line("note"), argv(3)),
        ),
    ),
    Program(
        "binary_records",
        ("buffered-io", "decoder"),
        "struct records read with read() calls served from a buffered reader's buffer",
        _binary_records,
        'usage["kwh"]',
        Truth(
            origins=(external("dump", "MTR1"),),
            allowed=(
                constant("header"),
                constant("record"),
                constant("start", "0.0"),
                external("open"),
                argv(1),
            ),
            decoys=(line("device"), line("labels-file"), line("labels"), argv(2)),
        ),
    ),
    Program(
        "csv_reader_totals",
        ("csv", "csv-pipeline"),
        "csv.reader over a file: the rows come out of the reader's buffer",
        _csv_reader_totals,
        'report["books"]',
        Truth(
            origins=(external("sales", "toys"),),
            allowed=(external("open"), constant("zero", "0.0"), argv(1)),
            decoys=(line("returns", "3.00"), argv(2)),
        ),
    ),
    Program(
        "csv_dictreader_paid",
        ("csv", "csv-pipeline", "comprehension", "sum"),
        "csv.DictReader rows filtered by a comprehension and summed",
        _csv_dictreader_paid,
        'totals["paid"]',
        Truth(
            origins=(external("payments", "void"),),
            allowed=(external("open"), argv(1)),
            decoys=(line("refunds", "refund_id"), line("currency"), argv(2)),
        ),
    ),
    Program(
        "socket_quote",
        ("socket",),
        "a reply read from a socket's makefile() buffer with readline()",
        _socket_quote,
        'order["value"]',
        Truth(
            origins=(external("quote", "11.52"), argv(2)),
            allowed=(
                constant("address"),
                external("connect"),
                constant("reader"),
                constant("request"),
                argv(1),
            ),
            decoys=(line("status"),),
        ),
    ),
    Program(
        "asyncio_client",
        ("asyncio", "asyncio-stream"),
        "a reply read with StreamReader.readline() from asyncio.open_connection",
        _asyncio_client,
        'converted["nok"]',
        Truth(
            origins=(external("loop", "11.52"), argv(2)),
            allowed=(
                constant("request"),
                constant("pence", "2"),
                argv(1),
                external("connection"),  # the socket the reply was read from
            ),
            decoys=(line("status", "OK open"),),
        ),
    ),
    Program(
        "asyncio_server",
        ("asyncio", "asyncio-stream", "sqlite-row"),
        "an asyncio.start_server handler prices the order line a client sent",
        _asyncio_server,
        'reply["total"]',
        Truth(
            origins=(external("loop", "ORDER"), external("price", "49990", call="fetchone")),
            allowed=(external("db"), constant("sql"), argv(1), argv(2)),
            decoys=(line("hello", "HELLO"), line("welcome")),
        ),
        flows=Flow("qty", "sql", reaches=(output("reply"),), avoids=(output("welcome"),)),
    ),
    Program(
        "sqlite_dict_factory",
        ("sqlite-row", "comprehension"),
        "a row_factory that builds a dictionary per row from cursor.description",
        _sqlite_dict_factory,
        'summary["line_total"]',
        Truth(
            origins=(external("lines", "129900", call="fetchall"),),
            allowed=(external("db"), constant("sql"), argv(1), argv(2)),
            decoys=(line("currency"), line("warehouse")),
        ),
    ),
    Program(
        "compressed_json",
        ("decoder", "json-pipeline"),
        "base64, zlib, UTF-8 and JSON decoding of a file's bytes",
        _compressed_json,
        'account["balance"]',
        Truth(
            origins=(external("dump", "eJ"),),
            allowed=(external("open"), constant("codec"), constant("cents", "100"), argv(1)),
            decoys=(line("branch-file"), line("branch"), argv(2)),
        ),
    ),
    Program(
        "ndjson_generator",
        ("generator", "json-pipeline"),
        "JSON lines parsed and filtered by generator functions, summed with dict.get",
        _ndjson_generator,
        'report["ines"]',
        Truth(
            origins=(external("events", "purchase"),),
            allowed=(external("open"), constant("zero", "0"), argv(1)),
            decoys=(line("feed"),),
        ),
    ),
    Program(
        "incremental_decoder",
        ("decoder", "join", "buffered-io"),
        "chunks of an unbuffered file fed to an incremental UTF-8 decoder and joined",
        _incremental_decoder,
        'statement["amount"]',
        Truth(
            origins=(external("chunks"),),
            allowed=(
                constant("chunk"),
                constant("codec"),
                constant("joiner"),
                constant("parse", "':'"),
                constant("parse", "','"),
                constant("parse", "'.'"),
                external("open"),
                argv(1),
            ),
            decoys=(line("terminal"),),
        ),
    ),
    Program(
        "orm_discount",
        ("orm",),
        "the £0.00 order: ORM attributes set from rows (session.get, select().first())",
        _orm_discount,
        'order["total_price"]',
        Truth(
            origins=(external("promo", "STAFF100"), external("product", "4999"), argv(3)),
            allowed=(
                constant("percent", "100"),
                constant("arithmetic"),
                constant("engine"),
                argv(1),
                argv(2),
                argv(4),
            ),
            decoys=(line("banner"), line("welcome")),
        ),
    ),
    Program(
        "orm_attribute_update",
        ("orm", "augmented-attr"),
        "in-place *= and += on an ORM attribute loaded from a row, then flushed",
        _orm_attribute_update,
        'report["credit"]',
        Truth(
            origins=(external("customer", "5000.0"), env("factor"), external("bonus", "bonus")),
            allowed=(external("bonus-file"), constant("engine"), argv(1), argv(2), argv(3)),
            decoys=(line("title"), line("other")),
        ),
    ),
    Program(
        "orm_from_csv",
        ("orm", "csv", "comprehension"),
        "ORM objects made from csv.DictReader rows by the mapped class's __init__",
        _orm_from_csv,
        'summary["first_limit"]',
        Truth(
            origins=(external("export", "c-10"),),
            allowed=(external("open"), argv(2)),
            decoys=(line("batch"), line("count"), argv(1)),
        ),
    ),
    Program(
        "flask_order",
        ("web", "orm"),
        "the £0.00 order through Flask on a real socket and SQLAlchemy's ORM",
        _flask_order,
        'response["total_price"]',
        Truth(
            origins=(
                external("request", '"qty"'),
                external("product", "4999"),
                external("promo", "STAFF100"),
            ),
            allowed=(
                constant("engine"),
                constant("percent", "100"),
                constant("arithmetic"),
                external("server"),
                argv(1),
                argv(2),
            ),
            decoys=(line("store"), line("banner"), line("welcome")),
        ),
    ),
    Program(
        "flask_csv_upload",
        ("web", "csv", "generator"),
        "a CSV request body through Flask, csv.DictReader over io.StringIO, sum()",
        _flask_csv_upload,
        'answer["value"]',
        Truth(
            origins=(external("request", "unit_price"),),
            allowed=(constant("pence", "2"), external("server"), argv(2)),
            decoys=(line("shop"), line("tier"), line("db"), argv(1)),
        ),
    ),
    Program(
        "logging_formatter",
        ("logging", "class"),
        "a record formatted by logging.Formatter and kept by a custom Handler",
        _logging_formatter,
        'audit["signup"]',
        Truth(
            origins=(constant("format"), external("export", "ines@")),
            allowed=(
                constant("logger"),
                constant("message"),
                constant("comma", "','"),
                external("open"),
                argv(1),
            ),
            decoys=(line("operator"), line("review")),
        ),
    ),
    Program(
        "logging_adapter_stream",
        ("logging", "buffered-io"),
        "LoggerAdapter extra fields, a StreamHandler into io.StringIO, getvalue()",
        _logging_adapter_stream,
        'log_view["text"]',
        Truth(
            origins=(env("request"), external("amount", "4999", call="fetchone")),
            allowed=(
                constant("format"),
                constant("message"),
                external("db"),
                constant("sql"),
                argv(1),
                argv(2),
            ),
            decoys=(line("token"),),
        ),
    ),
    Program(
        "comprehension_nested",
        ("comprehension", "sum", "sorted"),
        "dict, set and list comprehensions, with a condition, summed",
        _comprehension_nested,
        'summary["total"]',
        Truth(
            origins=(external("catalogue", "4900", call="fetchall"), external("order", "lamp")),
            allowed=(external("db"), constant("sql"), external("open"), argv(1), argv(2)),
            decoys=(line("channel"),),
        ),
    ),
    Program(
        "generator_running_total",
        ("generator",),
        "yield from over per-file generators, and a running-total generator",
        _generator_running_total,
        'stock["closing"]',
        Truth(
            origins=(
                constant("opening"),
                external("deliveries", "12"),
                external("deliveries", "5"),
            ),
            allowed=(external("open"), argv(1), argv(2)),
            decoys=(line("archive", "900"), argv(3)),
        ),
    ),
    Program(
        "closure_tally",
        ("closure",),
        "a converter closure per rate and a nonlocal running tally",
        _closure_tally,
        'report["nok"]',
        Truth(
            origins=(env("nok"), external("takings", "10.0", call="fetchall")),
            allowed=(constant("zero", "0"), external("db"), constant("sql"), argv(1)),
            decoys=(line("sek"),),
        ),
    ),
    Program(
        "class_hierarchy_fees",
        ("class",),
        "overridden class attributes and super() in a small class hierarchy",
        _class_hierarchy_fees,
        'quote["express"]',
        Truth(
            origins=(
                constant("express"),
                constant("per-kg"),
                constant("surge"),
                external("weight", "4.0", call="fetchone"),
            ),
            allowed=(external("db"), constant("sql"), argv(1), argv(2)),
            decoys=(line("base"), line("economy")),
        ),
    ),
    Program(
        "exception_fallback",
        ("exception", "class"),
        "a fallback in an except clause, and a value carried by a raised exception",
        _exception_fallback,
        'receipt["fee"]',
        Truth(
            origins=(constant("default"), external("amount", "90000", call="fetchone")),
            allowed=(
                constant("half", "2"),
                constant("cents", "2"),
                external("db"),
                constant("sql"),
                argv(1),
                argv(2),
            ),
            decoys=(line("rate"), line("limit")),
        ),
    ),
    Program(
        "logging_pii_flows",
        ("logging", "csv"),
        "an email logged through logging to a file, a StringIO and stdout",
        _logging_pii_flows,
        "logged",
        Truth(
            origins=(constant("format"), external("export", "ines@")),
            allowed=(constant("message"), external("open"), argv(1)),
            decoys=(
                line("operator"),
                line("review"),
                line("log-file"),
                line("count"),
                argv(2),
            ),
        ),
        flows=Flow(
            "email",
            "message",
            reaches=(output("message", "ines@"),),
            avoids=(output("message", "tom@"), output("review"), output("count")),
        ),
    ),
    Program(
        "control_layout",
        ("control", "sum", "join"),
        "negative control: a layout from constant tuples, merged into a dict of inputs",
        _control_layout,
        'report["rule"]',
        Truth(
            origins=(constant("columns"), constant("widths")),
            allowed=(constant("gaps"), constant("dash")),
            decoys=(
                line("title"),
                line("footer-file"),
                line("footer"),
                line("db"),
                line("rows"),
                argv(1),
                argv(2),
            ),
        ),
        control=True,
    ),
    Program(
        "control_policy",
        ("control", "dataclass", "copy"),
        "negative control: dataclass defaults through deepcopy and asdict beside inputs",
        _control_policy,
        'notice["deadline_days"]',
        Truth(
            origins=(constant("grace"), constant("reminders")),
            decoys=(line("owner"), line("db"), line("balance"), argv(1)),
        ),
        control=True,
    ),
)
