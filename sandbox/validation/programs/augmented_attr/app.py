"""Monthly statement: an account object made from its database row; interest from the
environment applied with `account.balance *= 1 + rate`, the account fee subtracted in place;
the owner (JSON file) and the overdraft limit (environment) are set on the same object.

Truth: the balance comes from the balance row, the rate and the fee constant. Decoys: the
owner file and the overdraft limit.
"""

import json
import os
import sqlite3
import sys

FEE_CENTS = 250  # <- origin:fee


class Account:
    def __init__(self, number, balance):
        self.number = number
        self.balance = balance
        self.owner = None
        self.overdraft = 0


def main():
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select number, balance_cents from accounts where number = ?"  # <- allow:sql
    number, balance = db.execute(sql, (sys.argv[2],)).fetchone()  # <- origin:balance
    account = Account(number, balance)
    with open(sys.argv[3]) as fh:  # <- decoy:owner-file
        account.owner = json.loads(fh.read())["owner"]  # <- decoy:owner
    account.overdraft = int(os.environ["OVERDRAFT_CENTS"])  # <- decoy:overdraft
    rate = float(os.environ["MONTHLY_RATE"])  # <- origin:rate
    account.balance *= 1 + rate  # <- allow:one
    account.balance -= FEE_CENTS
    statement = {"owner": account.owner, "overdraft": account.overdraft}
    statement["balance"] = account.balance
    print(json.dumps(statement))  # <- trace


main()
