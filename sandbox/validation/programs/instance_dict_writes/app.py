"""Credit limit: a customer profile filled by writes that Python code does not make one by
one: its row (a sqlite3.Row) poured into its __dict__ with update(), then overrides from a
JSON file set with setattr() in a loop; the nickname comes from the environment.

Truth: the limit comes from the credit row and the override file's boost. Decoys: the
nickname, and the region row read by a second query.
"""

import json
import os
import sqlite3
import sys


class Profile:
    def __init__(self, customer):
        self.customer = customer


def main():
    nickname = os.environ["NICKNAME"]  # <- decoy:nickname
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    db.row_factory = sqlite3.Row
    sql = "select credit_limit, tier from customers where id = ?"  # <- allow:sql
    row = db.execute(sql, (sys.argv[2],)).fetchone()  # <- origin:credit
    region = db.execute("select name from regions limit 1").fetchone()  # <- decoy:region
    profile = Profile(sys.argv[2])
    profile.__dict__.update(dict(row))
    with open(sys.argv[3]) as fh:  # <- allow:overrides-file
        overrides = json.loads(fh.read())  # <- origin:overrides
    for key, value in overrides.items():
        setattr(profile, key, value)
    limits = {"nickname": nickname, "region": region["name"]}
    limits["credit"] = profile.credit_limit * profile.limit_boost
    print(json.dumps(limits))  # <- trace


main()
