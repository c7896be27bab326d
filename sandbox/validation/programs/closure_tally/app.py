"""Converted takings: a closure factory makes a converter per currency from the environment's
rates, and a tally closure keeps a running sum in a nonlocal variable; the euro takings come
from the till database. A Swedish converter is made too, for a preview.

Truth: the tally comes from the euro rows, the NOK rate, and the tally's zero. Decoys: the
SEK rate.
"""

import json
import os
import sqlite3
import sys


def make_converter(rate):
    def convert(amount):
        return amount * rate

    return convert


def make_tally():
    total = 0  # <- allow:zero

    def add(value):
        nonlocal total
        total += value
        return total

    return add


def main():
    to_sek = make_converter(float(os.environ["EUR_SEK"]))  # <- decoy:sek
    to_nok = make_converter(float(os.environ["EUR_NOK"]))  # <- origin:nok
    tally = make_tally()
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select amount from takings where currency = 'EUR'"  # <- allow:sql
    amounts = [amount for (amount,) in db.execute(sql).fetchall()]  # <- origin:takings
    result = None
    for amount in amounts:
        result = tally(to_nok(amount))
    report = {"sek_preview": to_sek(amounts[0])}
    report["nok"] = result
    print(json.dumps(report))  # <- trace


main()
