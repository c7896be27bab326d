"""Delivery statistics: minutes per delivery for one depot from the deliveries database,
their mean and median from the statistics module; the SLA target from the environment and
the cancelled count from a second query are reported beside them.

Truth: the mean comes from the depot's delivery rows. Decoys: the SLA target and the
cancelled count.
"""

import json
import os
import sqlite3
import statistics
import sys


def main():
    target = int(os.environ["SLA_TARGET_MINUTES"])  # <- decoy:target
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    cancelled = db.execute("select count(*) from cancelled").fetchone()[0]  # <- decoy:cancelled
    sql = "select minutes from deliveries where depot = ?"  # <- allow:sql
    rows = db.execute(sql, (sys.argv[2],)).fetchall()  # <- origin:rows
    times = [minutes for (minutes,) in rows]
    summary = {"target": target, "cancelled": cancelled, "median": statistics.median(times)}
    summary["mean_minutes"] = statistics.mean(times)
    print(json.dumps(summary))  # <- trace


main()
