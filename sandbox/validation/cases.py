"""The validation suite's manifest: for each program, its inputs, where to trace, and the answer.

Each case is an ordinary program in programs/<name>/ that reads several real inputs (SQLite
databases, JSON and CSV files, environment variables, the command line). Exactly one thing
is planted: a wrong constant, or one poisoned input among several. The traced value is the
output field that the planted cause reaches. The case contract is as follows:

- The planted origin is in the traced value's backward slice, and no other candidate root
  cause (see sealtrace.sandbox._ranking) is as close to the value as it is.
- Decoys are other inputs and constants that change other fields, or intermediate values,
  without reaching the traced value. Where they can, decoys are read before the planted
  input and live in the same containers, objects, closures and generators. So a decoy that
  leaked into the slice at the same distance would win the tie-break, and the case would
  fail.
- Lines are named by markers in the program, not by number: `# <- planted` on the line where
  the planted origin enters (the call that reads an input, or the literal of a wrong
  constant), and `# <- trace` on the line where the value is traced. A missing or repeated
  marker is an error.
- `value` narrows the answer when the same line reads several inputs (a helper called in a
  loop). It is a piece of text that only the planted input's value shows.

`depth` is one more than the planted origin's distance from the value in a correct slice.
That shows every candidate that could outrank it, and a margin of one step, and no more.

The negative control (`truth=None`) traces a value that depends on nothing external. It
passes when its slice is complete within its depth, and every origin in it is a constant:
no external, environment or command-line input, and nothing of unknown origin.

`make_inputs` writes a case's inputs into an empty directory, which becomes the recorded
run's working directory. It returns the arguments and the environment variables that the
program is run with.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .inputs import Inputs, database, write_json

__all__ = ["CASES", "PLANTED", "PROGRAMS", "TRACE", "Case", "Inputs", "Origin", "marked_line"]

PROGRAMS = Path(__file__).resolve().parent / "programs"
PLANTED = "# <- planted"
TRACE = "# <- trace"


@dataclass(frozen=True)
class Origin:
    """The planted root cause: its kind, and where it enters the program.

    external, env, constant: the line in `file` that carries the planted marker.
    argv: the index of the argument in sys.argv, which has no line.
    """

    kind: str
    file: str = "app.py"
    argv_index: int | None = None
    value: str | None = None


@dataclass(frozen=True)
class Case:
    name: str
    plants: str
    make_inputs: Callable[[Path], Inputs]
    trace: str
    truth: Origin | None
    depth: int
    script: str = "app.py"
    directory: str = ""  # under programs/; the case's name if empty

    @property
    def program(self) -> Path:
        return PROGRAMS / (self.directory or self.name)

    @property
    def is_control(self) -> bool:
        return self.truth is None

    def trace_line(self, root: Path | None = None) -> int:
        return marked_line((root or self.program) / self.script, TRACE)

    def truth_where(self, root: Path | None = None) -> str:
        """The truth as a candidate's `where`: FILE:LINE, or argv[N]."""
        truth = self.truth
        if truth is None:
            return ""
        if truth.kind == "argv":
            return f"argv[{truth.argv_index}]"
        return f"{truth.file}:{marked_line((root or self.program) / truth.file, PLANTED)}"


def marked_line(path: Path, marker: str) -> int:
    lines = [n for n, text in enumerate(path.read_text().splitlines(), 1) if marker in text]
    if len(lines) != 1:
        raise ValueError(f"{path} must have exactly one line marked {marker!r}, not {len(lines)}")
    return lines[0]


# -- inputs ---------------------------------------------------------------------------------


def _wrong_constant(d: Path) -> Inputs:
    database(
        d / "ledger.db",
        "create table accounts (customer text, balance_cents int, days_late int, reminders int)",
        "insert into accounts values (?, ?, ?, ?)",
        [("c-1042", 18250, 31, 2), ("c-2001", 500, 0, 0)],
    )
    write_json(d / "preferences.json", {"language": "nb", "paperless": True})
    return Inputs(("ledger.db", "c-1042", "preferences.json"))


def _wrong_default(d: Path) -> Inputs:
    database(
        d / "rates.db",
        "create table zones (country text, surcharge_cents int)",
        "insert into zones values (?, ?)",
        [("NO", 900), ("DE", 0)],
    )
    order = {
        "country": "NO",
        "items": [{"sku": "tent", "grams": 2350}, {"sku": "mat", "grams": 650}],
    }
    write_json(d / "order.json", order)
    return Inputs(("rates.db", "order.json"), {"SHIP_CARRIER": "fjord-express"})


def _wrong_class_constant(d: Path) -> Inputs:
    database(
        d / "customers.db",
        "create table customers (name text, tier text)",
        "insert into customers values (?, ?)",
        [("ines", "gold"), ("tom", "silver")],
    )
    lines = [{"sku": "kettle", "cents": 3999, "qty": 1}, {"sku": "filter", "cents": 499, "qty": 3}]
    write_json(d / "cart.json", {"customer": "ines", "lines": lines})
    return Inputs(("customers.db", "cart.json"), {"SHIPPING_CENTS": "495"})


def _poisoned_input(d: Path) -> Inputs:
    database(
        d / "inventory.db",
        "create table stock (warehouse text, sku text, on_hand int)",
        "insert into stock values (?, ?, ?)",
        [
            ("north", "BOLT-M6", 1200),
            ("south", "BOLT-M6", -40),
            ("east", "BOLT-M6", 750),
            ("south", "NUT-M6", 300),
        ],
    )
    write_json(d / "warehouses.json", {"warehouses": ["north", "south", "east"]})
    return Inputs(("inventory.db", "warehouses.json"), {"REPORT_TITLE": "Fasteners, week 19"})


def _dict_routing(d: Path) -> Inputs:
    database(
        d / "limits.db",
        "create table overrides (account text, period text, amount int)",
        "insert into overrides values (?, ?, ?)",
        [("acc-7", "daily", 250000), ("acc-7", "weekly", 900), ("acc-9", "daily", 300)],
    )
    write_json(d / "profile.json", {"owner": "R. Diaz", "currency": "EUR", "monthly_cap": 8000})
    return Inputs(("limits.db", "acc-7", "profile.json"), {"WEEKLY_CAP": "2500"})


def _dict_items_loop(d: Path) -> Inputs:
    database(
        d / "payments.db",
        "create table payments (currency text, amount real)",
        "insert into payments values (?, ?)",
        [("EUR", 120.5), ("EUR", -5000.0), ("EUR", 99.9), ("SEK", 410.0)],
    )
    (d / "usd.csv").write_text("currency,amount\nUSD,40.25\nUSD,12.00\n")
    return Inputs(("payments.db", "usd.csv"), {"GBP_TAKINGS": "310.40"})


def _list_routing(d: Path) -> Inputs:
    database(
        d / "plant.db",
        "create table sensors (name text, celsius real)",
        "insert into sensors values (?, ?)",
        [("boiler", 64.5)],
    )
    (d / "kitchen.csv").write_text("kitchen,21.5\n")
    (d / "attic.csv").write_text("attic,97.0\n")
    (d / "cellar.csv").write_text("cellar,12.0\n")
    args = ("plant.db", "kitchen.csv", "attic.csv", "cellar.csv")
    return Inputs(args, {"OUTDOOR_CELSIUS": "8.5"})


def _attribute_mutation(d: Path) -> Inputs:
    database(
        d / "bank.db",
        "create table accounts (number text, balance int)",
        "insert into accounts values (?, ?)",
        [("NO-77", 120000)],
    )
    write_json(d / "snapshot.json", {"balance": -9900000, "taken_at": "2024-05-01T02:00Z"})
    return Inputs(("bank.db", "NO-77", "snapshot.json"), {"OVERDRAFT_CENTS": "50000"})


def _closure_capture(d: Path) -> Inputs:
    database(
        d / "rates.db",
        "create table rates (code text, rate real)",
        "insert into rates values (?, ?)",
        [("USD", 1.08)],
    )
    write_json(d / "catalogue.json", {"list_cents": {"lamp": 4900, "desk": 25900}})
    return Inputs(("rates.db", "catalogue.json"), {"GBP_RATE": "0.86", "EUR_RATE": "10.0"})


def _generator_pipeline(d: Path) -> Inputs:
    database(
        d / "utilities.db",
        "create table meters (meter text, owner text)",
        "insert into meters values (?, ?)",
        [("meter-a", "flat 1"), ("meter-b", "flat 2"), ("meter-c", "flat 3")],
    )
    meters = d / "meters"
    meters.mkdir()
    (meters / "meter-a.csv").write_text("# meter,watt_hours\nmeter-a,5120\n")
    (meters / "meter-b.csv").write_text("# meter,watt_hours\nmeter-b,9999999\n")
    (meters / "meter-c.csv").write_text("# meter,watt_hours\nmeter-c,4300\n")
    return Inputs(("utilities.db", "meters", "meter-b"), {"METER_UNIT": "kWh"})


def _intermediate_decoy(d: Path) -> Inputs:
    database(
        d / "catalogue.db",
        "create table prices (sku text, cents int)",
        "insert into prices values (?, ?)",
        [("KB-101", 49990), ("MS-220", 1999)],
    )
    coupons = [
        {"sku": "KB-101", "off_cents": 500, "active": False},
        {"sku": "MS-220", "off_cents": 200, "active": True},
    ]
    write_json(d / "coupons.json", {"coupons": coupons})
    return Inputs(("catalogue.db", "coupons.json", "KB-101"), {"PROMO_PCT": "15"})


def _argv_option(d: Path) -> Inputs:
    database(
        d / "customers.db",
        "create table customers (id text, name text, street text, city text)",
        "insert into customers values (?, ?, ?, ?)",
        [("17", "Ada Byre", "Storgata 1", "Oslo")],
    )
    write_json(d / "template.json", {"layout": "{name}\n{street}\n{city}", "per_sheet": 8})
    args = ("customers.db", "17", "--template", "template.json", "--copies", "300")
    return Inputs(args, {"LABEL_PRINTER": "zebra-2"})


def _negative_control(d: Path) -> Inputs:
    database(
        d / "orders.db",
        "create table orders (id int)",
        "insert into orders values (?)",
        [(1,), (2,), (3,)],
    )
    write_json(d / "export.json", {"target": "s3://exports/nightly"})
    return Inputs(("orders.db", "export.json"), {"EXPORT_OPERATOR": "night-shift"})


CASES: tuple[Case, ...] = (
    Case(
        "wrong_constant",
        "a wrong module-level constant in a config module",
        _wrong_constant,
        'invoice["late_fee"]',
        Origin("constant", "config.py"),
        depth=1,
    ),
    Case(
        "wrong_default",
        "a wrong function default, beside incidental literals on the way",
        _wrong_default,
        'quote["parcel"]',
        Origin("constant"),
        depth=3,
    ),
    Case(
        "wrong_class_constant",
        "a wrong class attribute in a module of policy classes",
        _wrong_class_constant,
        'quote["discount_pct"]',
        Origin("constant", "tiers.py"),
        depth=2,
    ),
    Case(
        "poisoned_input",
        "one poisoned database row among several read by the same line",
        _poisoned_input,
        'report["south"]',
        Origin("external", value="'south'"),
        depth=2,
    ),
    Case(
        "dict_routing",
        "a database value routed through merged and nested dictionaries",
        _dict_routing,
        'response["limits"]["daily"]["cap"]',
        Origin("external"),
        depth=2,
    ),
    Case(
        "dict_items_loop",
        "database values summed into a dictionary, then read back through .items()",
        _dict_items_loop,
        'report["EUR"]',
        Origin("external"),
        depth=6,
    ),
    Case(
        "list_routing",
        "one CSV file among several, routed through lists of tuples",
        _list_routing,
        'alarm["celsius"]',
        Origin("external", value="attic"),
        depth=7,
    ),
    Case(
        "attribute_mutation",
        "a snapshot value set on an object by a helper method, over a stale one",
        _attribute_mutation,
        'statement["balance"]',
        Origin("external"),
        depth=4,
    ),
    Case(
        "closure_capture",
        "an environment variable captured by one of several closures",
        _closure_capture,
        'prices["desk"]["EUR"]',
        Origin("env"),
        depth=4,
    ),
    Case(
        "generator_pipeline",
        "one file among several streamed through a pipeline of generators",
        _generator_pipeline,
        'answer["kwh"]',
        Origin("external", value="meter-b"),
        depth=8,
    ),
    Case(
        "intermediate_decoy",
        "decoys that change intermediate values but not the output",
        _intermediate_decoy,
        'check["price"]',
        Origin("external"),
        depth=2,
    ),
    Case(
        "argv_option",
        "a wrong command-line option parsed by argparse",
        _argv_option,
        'job["copies"]',
        Origin("argv", argv_index=6),
        depth=10,
    ),
    Case(
        "negative_control",
        "a value made only from constants, kept beside external values",
        _negative_control,
        'manifest.meta["layout"]["usable"]',
        None,
        depth=12,
    ),
)
