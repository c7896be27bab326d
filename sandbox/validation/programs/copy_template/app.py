"""Invoice from a template: a module-level template deep-copied per invoice, its lines
filled from the order database, then a shallow copy gets the rush surcharge (environment)
added to its fee; the note comes from a JSON file.

Truth: the total comes from the base fee constant (through deepcopy and copy), the order
rows and the surcharge. Decoys: the note file.
"""

import copy
import json
import os
import sqlite3
import sys

BASE_FEE = 495  # <- origin:fee
TEMPLATE = {"fee": BASE_FEE, "lines": [], "terms": "30 days"}


def main():
    invoice = copy.deepcopy(TEMPLATE)
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select sku, cents from lines where invoice = ?"  # <- allow:sql
    for sku, cents in db.execute(sql, (sys.argv[2],)).fetchall():  # <- origin:lines
        invoice["lines"].append({"sku": sku, "cents": cents})
    rush = copy.copy(invoice)
    rush["fee"] += int(os.environ["RUSH_SURCHARGE"])  # <- origin:surcharge
    with open(sys.argv[3]) as fh:  # <- decoy:note-file
        rush["note"] = json.loads(fh.read())["note"]  # <- decoy:note
    summary = {"note": rush["note"]}
    summary["total"] = rush["fee"] + sum(line["cents"] for line in rush["lines"])
    print(json.dumps(summary))  # <- trace


main()
