"""Ledger positions: a dict subclass whose __missing__ opens every account at the opening
balance, and each transfer row from the transfers database added in place; the ledger's
name comes from the environment.

Truth: acme's position comes from the opening balance constant (through __missing__, called
by the dictionary) and acme's rows. Decoys: globex's rows, read by the same loop, and the
ledger name.
"""

import json
import os
import sqlite3
import sys

OPENING_BALANCE = 100  # <- origin:opening


class Ledger(dict):
    def __missing__(self, account):
        return OPENING_BALANCE


def main():
    name = os.environ["LEDGER_NAME"]  # <- decoy:name
    ledger = Ledger()
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select account, delta from transfers order by id"  # <- allow:sql
    for account, delta in db.execute(sql):  # <- origin:transfers decoy:globex
        ledger[account] += delta
    report = {"ledger": name, "globex": ledger["globex"]}
    report["acme"] = ledger["acme"]
    print(json.dumps(report))  # <- trace


main()
