"""Order lines as dictionaries: a row factory (the documented dict_factory recipe) turns
every row of the order query into a dictionary keyed by the cursor's column names; the line
total is price times quantity. The warehouse comes from a second query, the currency from
the environment.

Truth: the line total comes from the order's row. Decoys: the warehouse row and the
currency.
"""

import json
import os
import sqlite3
import sys


def dict_factory(cursor, row):
    return {column[0]: row[i] for i, column in enumerate(cursor.description)}


def main():
    currency = os.environ["CURRENCY"]  # <- decoy:currency
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    db.row_factory = dict_factory
    warehouse = db.execute("select name from warehouses limit 1").fetchone()  # <- decoy:warehouse
    sql = "select sku, price_cents, qty from lines where order_id = ?"  # <- allow:sql
    lines = db.execute(sql, (sys.argv[2],)).fetchall()  # <- origin:lines
    first = lines[0]
    summary = {"currency": currency, "warehouse": warehouse["name"]}
    summary["line_total"] = first["price_cents"] * first["qty"]
    print(json.dumps(summary))  # <- trace


main()
