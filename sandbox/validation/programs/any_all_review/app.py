"""Payout review: a merchant's payouts need review when any payment is over the limit or
not every settlement line is settled. Payments come from the payments database, the limit
from the environment, settlement statuses from the bank's CSV file.

Truth: the review score comes from every payment, the limit, every status and the SETTLED
constant (any() and all() consume every item here: none is over the limit, all are
settled). Decoys: the reviewer's name from the environment and the merchant's name from a
JSON file.
"""

import json
import os
import sqlite3
import sys

SETTLED = "settled"  # <- origin:settled


def main():
    reviewer = os.environ["REVIEWER"]  # <- decoy:reviewer
    with open(sys.argv[3]) as fh:  # <- decoy:merchant-file
        merchant = json.loads(fh.read())["name"]  # <- decoy:merchant
    limit = int(os.environ["REVIEW_LIMIT_CENTS"])  # <- origin:limit
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select cents from payments"  # <- allow:payments-sql
    amounts = [a for (a,) in db.execute(sql).fetchall()]  # <- origin:payments
    with open(sys.argv[2]) as fh:  # <- allow:statuses-file
        lines = fh.read().splitlines()[1:]  # <- origin:statuses
    statuses = [line.split(",")[2].strip() for line in lines]  # <- allow:comma
    over_limit = any(amount > limit for amount in amounts)
    all_settled = all(status == SETTLED for status in statuses)
    review = {"merchant": merchant, "reviewer": reviewer}
    review["score"] = int(over_limit) + int(not all_settled)
    print(json.dumps(review))  # <- trace


main()
