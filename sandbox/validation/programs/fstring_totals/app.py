"""Takings line for the till log: takings per payment method summed from the till's CSV
export into a dictionary (with dict.get), then the whole dictionary shown in an f-string
after the till's name from the environment; refunds from a second file are summed apart.

Truth: the line comes from the till export, the till name and the f-string's text.
Decoys: the refunds file.
"""

import json
import os
import sys


def totals_from(path):
    totals = {}
    with open(path) as fh:  # <- allow:open
        rows = fh.read().splitlines()  # <- origin:takings decoy:refunds
    for row in rows[1:]:
        method, cents = row.split(",")  # <- allow:comma
        totals[method] = totals.get(method, 0) + int(cents)  # <- allow:zero
    return totals


def main():
    till = os.environ["TILL_NAME"]  # <- origin:till
    takings = totals_from(sys.argv[1])
    refunds = totals_from(sys.argv[2])
    log = {"refunds": refunds}
    log["line"] = f"{till} takings {takings}"  # <- allow:text
    print(json.dumps(log))  # <- trace


main()
