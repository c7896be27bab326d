"""Account statement: the account is opened from the bank database, restored from the
nightly snapshot (JSON), and given an overdraft from the environment, each by a helper
method that mutates the account's attributes.

Planted: the snapshot file's balance. Decoys: the stale balance from the database (set first
and then overwritten), the overdraft and the hold, which mutate other attributes.
"""

import json
import os
import sqlite3
import sys


class Account:
    def __init__(self, number, balance):
        self.number = number
        self.balance = balance
        self.overdraft = 0
        self.held = 0
        self.notes = []

    def restore(self, snapshot):
        self.balance = snapshot["balance"]
        self.notes.append("restored " + snapshot["taken_at"])

    def grant_overdraft(self, cents):
        self.overdraft = cents
        self.notes.append("overdraft")

    def available(self):
        return self.balance + self.overdraft - self.held


def place_hold(account, cents):
    account.held += cents
    account.notes.append("hold")


def load_snapshot(path):
    with open(path) as fh:
        return json.loads(fh.read())  # <- planted


def main():
    db = sqlite3.connect(sys.argv[1])
    row = db.execute("select number, balance from accounts where number = ?", (sys.argv[2],))
    account = Account(*row.fetchone())
    account.grant_overdraft(int(os.environ["OVERDRAFT_CENTS"]))
    account.restore(load_snapshot(sys.argv[3]))
    place_hold(account, account.overdraft // 2)
    statement = {"number": account.number, "available": account.available()}
    statement["balance"] = account.balance
    print(json.dumps(statement, sort_keys=True))  # <- trace


main()
