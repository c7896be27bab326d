"""Quote with VAT: a dataclass made from a price row, its VAT rate replaced with
dataclasses.replace() by the rate from the environment; asdict() of the result is kept for
the audit trail, and the currency comes from a JSON settings file.

Truth: the gross price comes from the net price row and the environment's VAT rate (and the
pennies' rounding). Decoys: the default VAT rate, replaced before it is used, and the
settings file.
"""

import dataclasses
import json
import os
import sqlite3
import sys

DEFAULT_VAT = 0.25  # <- decoy:default-vat


@dataclasses.dataclass
class Quote:
    sku: str
    net: float
    vat_rate: float = DEFAULT_VAT  # <- decoy:vat-field


def main():
    with open(sys.argv[2]) as fh:  # <- decoy:settings-file
        currency = json.loads(fh.read())["currency"]  # <- decoy:settings
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select sku, net from prices where sku = ?"  # <- allow:sql
    sku, net = db.execute(sql, (sys.argv[3],)).fetchone()  # <- origin:net
    quote = Quote(sku=sku, net=net)
    vat = float(os.environ["VAT_RATE"])  # <- origin:vat
    final = dataclasses.replace(quote, vat_rate=vat)
    invoice = {"currency": currency, "audit": dataclasses.asdict(final)}
    invoice["gross"] = round(final.net * (1 + final.vat_rate), 2)  # <- allow:arithmetic
    print(json.dumps(invoice))  # <- trace


main()
