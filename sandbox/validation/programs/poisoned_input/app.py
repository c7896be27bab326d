"""Stock report: on-hand counts per warehouse (one query each) from the inventory database,
the warehouses to report from a JSON file, the report's title from the environment.

Planted: the south warehouse's row (a negative count). Decoys: the north and east rows, read
by the same line before and after it, which reach the other fields of the report.
"""

import json
import os
import sqlite3
import sys


def on_hand(db, warehouse):
    query = "select warehouse, on_hand from stock where warehouse = ? and sku = ?"
    row = db.execute(query, (warehouse, "BOLT-M6")).fetchone()  # <- planted: the south row
    return row[1]


def main():
    title = os.environ["REPORT_TITLE"]
    with open(sys.argv[2]) as fh:
        warehouses = json.loads(fh.read())["warehouses"]
    db = sqlite3.connect(sys.argv[1])
    counts = {}
    for warehouse in warehouses:
        counts[warehouse] = on_hand(db, warehouse)
    report = {"title": title, "sku": "BOLT-M6"}
    for warehouse in warehouses:
        report[warehouse] = counts[warehouse]
    report["total"] = sum(counts[w] for w in warehouses)
    print(json.dumps(report, sort_keys=True))  # <- trace


main()
