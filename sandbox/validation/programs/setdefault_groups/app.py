"""Hours per team: timesheet rows from the database grouped with
`groups.setdefault(team, []).append(hours)`, then one team's hours summed; the week label
comes from the environment.

Truth: the ops total comes from the ops rows. Decoys: the dev rows, read by the same loop,
and the week label.
"""

import json
import os
import sqlite3
import sys


def main():
    week = os.environ["WEEK_LABEL"]  # <- decoy:week
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    groups = {}
    sql = "select team, hours from timesheets order by id"  # <- allow:sql
    for team, hours in db.execute(sql):  # <- origin:hours decoy:dev
        groups.setdefault(team, []).append(hours)
    report = {"week": week, "dev": sum(groups["dev"])}
    report["ops"] = sum(groups["ops"])
    print(json.dumps(report))  # <- trace


main()
