"""Revenue per region: sale rows from the database added into a defaultdict(float) with
`by_region[region] += amount`; the report's label comes from the environment.

Truth: the north total comes from the north rows (and the 0.0 of the float factory). Decoys:
the south rows, read by the same loop, and the label.
"""

import json
import os
import sqlite3
import sys
from collections import defaultdict


def main():
    label = os.environ["REGION_LABEL"]  # <- decoy:label
    by_region = defaultdict(float)  # <- allow:factory
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select region, amount from sales order by id"  # <- allow:sql
    for region, amount in db.execute(sql):  # <- origin:sales decoy:south
        by_region[region] += amount
    report = {"label": label, "south": by_region["south"]}
    report["north"] = by_region["north"]
    print(json.dumps(report))  # <- trace


main()
