"""Takings per currency: euro payments from the payments database, dollar payments from a
CSV export, the pound total from the environment; summed into one dictionary and rounded
into the report by iterating over its items.

Planted: the euro payments query. Decoys: the dollar and pound takings, stored in the same
dictionary before the euro ones.
"""

import json
import os
import sqlite3
import sys


def main():
    totals = {}
    totals["GBP"] = float(os.environ["GBP_TAKINGS"])
    with open(sys.argv[2]) as fh:
        lines = fh.read().splitlines()
    for line in lines[1:]:
        currency, amount = line.split(",")
        totals[currency] = totals.get(currency, 0.0) + float(amount)
    db = sqlite3.connect(sys.argv[1])
    query = "select amount from payments where currency = 'EUR'"
    for (amount,) in db.execute(query).fetchall():  # <- planted
        totals["EUR"] = totals.get("EUR", 0.0) + amount
    report = {currency: round(total, 2) for currency, total in totals.items()}
    print(json.dumps(report, sort_keys=True))  # <- trace


main()
