"""Card fee with exceptions: the fee rate from the environment does not parse, so the parser
falls back to the default rate; a charge over the card's limit raises an exception carrying
the amount, and the handler charges half of it. The amount comes from the orders database,
the limit from the environment.

Truth: the fee comes from the amount row (through the exception's attribute), the default
rate, and the halving and rounding. Decoys: the unparsable rate (it raised) and the limit
(it only decided which branch ran).
"""

import json
import os
import sqlite3
import sys

DEFAULT_RATE = 0.05  # <- origin:default


class LimitExceeded(Exception):
    def __init__(self, amount, limit):
        super().__init__(f"{amount} is over the limit of {limit}")
        self.amount = amount
        self.limit = limit


def parse_rate(text):
    try:
        return float(text)
    except ValueError:
        return DEFAULT_RATE


def charge(amount, limit):
    if amount > limit:
        raise LimitExceeded(amount, limit)
    return amount


def main():
    rate = parse_rate(os.environ["FEE_RATE"])  # <- decoy:rate
    limit = int(os.environ["CARD_LIMIT"])  # <- decoy:limit
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select cents from orders where id = ?"  # <- allow:sql
    (amount,) = db.execute(sql, (sys.argv[2],)).fetchone()  # <- origin:amount
    try:
        charged = charge(amount, limit)
    except LimitExceeded as exc:
        charged = exc.amount / 2  # <- allow:half
    receipt = {"charged": charged}
    receipt["fee"] = round(charged * rate, 2)  # <- allow:cents
    print(json.dumps(receipt))  # <- trace


main()
