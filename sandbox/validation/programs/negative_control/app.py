"""Export manifest: the order count from the orders database, the export target from a JSON
file, the operator from the environment, and the page layout of the printed manifest.

Control: the layout's usable rows depend on nothing external, only on the constants below,
although they are computed beside external values, kept in the same object and dictionaries,
and feed a value (the page count) that does depend on the database.
"""

import json
import os
import sqlite3
import sys

PAGE_ROWS = 40
MARGIN_ROWS = 4


class Manifest:
    def __init__(self, target):
        self.target = target
        self.meta = {}

    def set(self, key, value):
        self.meta[key] = value


def layout(rows_per_page, margin):
    usable = rows_per_page - margin
    return {"usable": usable, "header": margin // 2}


def main():
    operator = os.environ["EXPORT_OPERATOR"]
    with open(sys.argv[2]) as fh:
        target = json.loads(fh.read())["target"]
    db = sqlite3.connect(sys.argv[1])
    count = db.execute("select count(*) from orders").fetchone()[0]
    manifest = Manifest(target)
    manifest.set("operator", operator)
    manifest.set("orders", count)
    manifest.set("layout", layout(PAGE_ROWS, MARGIN_ROWS))
    manifest.set("pages", -(-count // manifest.meta["layout"]["usable"]))
    print(json.dumps({"target": manifest.target, **manifest.meta}, sort_keys=True))  # <- trace


main()
