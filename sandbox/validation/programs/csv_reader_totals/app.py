"""Category totals: a shop's sales export read with csv.reader and summed per category with
dict.get; the returns export goes through the same function for another field.

Truth: the books total comes from the sales export, read by the csv reader's first row.
Decoys: the returns export, read by the same lines.
"""

import csv
import json
import sys


def totals(path):
    out = {}
    with open(path, newline="") as fh:  # <- allow:open
        reader = csv.reader(fh)
        next(reader)  # <- origin:sales decoy:returns
        for category, amount in reader:
            out[category] = out.get(category, 0.0) + float(amount)  # <- allow:zero
    return out


def main():
    sales = totals(sys.argv[1])
    returns = totals(sys.argv[2])
    report = {"returned_books": returns.get("books", 0.0)}
    report["books"] = sales["books"]
    print(json.dumps(report))  # <- trace


main()
