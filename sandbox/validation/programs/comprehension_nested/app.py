"""Order total with comprehensions: a dict comprehension of prices from the catalogue rows,
a dict comprehension with a condition over the order's lines (JSON file), a set
comprehension of SKUs, and a list comprehension summed in SKU order; the channel comes from
the environment.

Truth: the total comes from the catalogue rows and the order file. Decoys: the channel.
"""

import json
import os
import sqlite3
import sys


def main():
    channel = os.environ["SALES_CHANNEL"]  # <- decoy:channel
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select sku, cents from catalogue"  # <- allow:sql
    prices = {sku: cents for sku, cents in db.execute(sql).fetchall()}  # <- origin:catalogue
    with open(sys.argv[2]) as fh:  # <- allow:open
        order = json.loads(fh.read())  # <- origin:order
    totals = {ln["sku"]: prices[ln["sku"]] * ln["qty"] for ln in order["lines"] if ln["qty"] > 0}
    skus = {sku for sku in totals}
    summary = {"channel": channel, "skus": len(skus)}
    summary["total"] = sum([totals[sku] for sku in sorted(skus)])
    print(json.dumps(summary))  # <- trace


main()
