"""Paid total: rows of a payments export read with csv.DictReader into a list, the paid ones
kept by a comprehension and their amounts summed; the currency comes from the environment
and the refunds export is read the same way for another field.

Truth: the paid total comes from the payments export. Decoys: the currency and the refunds
export.
"""

import csv
import json
import os
import sys

PAID = "paid"


def rows(path):
    with open(path, newline="") as fh:  # <- allow:open
        return [row for row in csv.DictReader(fh)]  # <- origin:payments decoy:refunds


def main():
    currency = os.environ["CURRENCY"]  # <- decoy:currency
    payments = rows(sys.argv[1])
    refunds = rows(sys.argv[2])
    paid = [float(row["amount"]) for row in payments if row["status"] == PAID]
    totals = {"currency": currency, "refunds": len(refunds)}
    totals["paid"] = sum(paid)
    print(json.dumps(totals))  # <- trace


main()
