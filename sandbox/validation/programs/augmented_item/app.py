"""Sales per region: the regions from a JSON file start at zero in a dictionary, and each
sale row from the sales database is added in place with `totals[region] += amount`.

Truth: the north total comes from the north rows (and the zero it started from). Decoys:
the south rows, read by the same loop, and the regions file, which only gives the keys.
"""

import json
import sqlite3
import sys


def main():
    with open(sys.argv[2]) as fh:  # <- decoy:regions-file
        regions = json.loads(fh.read())["regions"]  # <- decoy:regions
    totals = {region: 0 for region in regions}  # <- allow:zero
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select region, amount from sales order by id"  # <- allow:sql
    for region, amount in db.execute(sql):  # <- origin:sales decoy:south
        totals[region] += amount
    print(json.dumps(totals))  # <- trace


main()
