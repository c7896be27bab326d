"""Invoice total: the invoice's lines from the billing database, each line's amount appended
to a list and summed; credit notes from a CSV file kept in a list of their own, and the
currency from the environment.

Truth: the total comes from the invoice's line rows. Decoys: the credit notes (summed into
another field) and the currency.
"""

import json
import os
import sqlite3
import sys


def main():
    currency = os.environ["INVOICE_CURRENCY"]  # <- decoy:currency
    with open(sys.argv[2]) as fh:  # <- decoy:credits-file
        credit_lines = fh.read().splitlines()  # <- decoy:credits
    credits = []
    for line in credit_lines[1:]:
        credits.append(int(line.split(",")[1]))
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    query = "select qty, unit_cents from lines where invoice = ?"  # <- allow:sql
    rows = db.execute(query, (sys.argv[3],)).fetchall()  # <- origin:lines
    amounts = []
    for qty, unit_cents in rows:
        amounts.append(qty * unit_cents)
    invoice = {"currency": currency, "credits": sum(credits)}
    invoice["total_cents"] = sum(amounts)
    print(json.dumps(invoice, sort_keys=True))  # <- trace


main()
