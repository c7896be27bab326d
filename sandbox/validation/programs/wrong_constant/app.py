"""Monthly invoice for one customer: balance and lateness from the ledger database, the
customer's preferences from a JSON file, fees from config.py.

Planted: LATE_FEE_CENTS in config.py is ten times the policy. Decoys: every other input and
constant reaches another field of the same invoice (MAX_CREDIT_CENTS even has the same value).
"""

import json
import sqlite3
import sys

from config import (
    CURRENCY,
    GRACE_DAYS,
    INTEREST_RATE_PCT,
    LATE_FEE_CENTS,
    MAX_CREDIT_CENTS,
    REMINDER_FEE_CENTS,
)


def load_account(db, customer):
    query = "select balance_cents, days_late, reminders from accounts where customer = ?"
    return db.execute(query, (customer,)).fetchone()


def load_preferences(path):
    with open(path) as fh:
        return json.loads(fh.read())


def build_invoice(account, preferences):
    balance, days_late, reminders = account
    invoice = {"currency": CURRENCY, "language": preferences["language"]}
    invoice["balance"] = balance
    invoice["interest"] = round(balance * INTEREST_RATE_PCT / 100)
    invoice["reminder_fees"] = reminders * REMINDER_FEE_CENTS
    invoice["late_fee"] = LATE_FEE_CENTS if days_late > GRACE_DAYS else 0
    invoice["credit_left"] = MAX_CREDIT_CENTS - balance
    fees = invoice["interest"] + invoice["reminder_fees"] + invoice["late_fee"]
    invoice["total"] = balance + fees
    return invoice


def main():
    db = sqlite3.connect(sys.argv[1])
    preferences = load_preferences(sys.argv[3])
    account = load_account(db, sys.argv[2])
    invoice = build_invoice(account, preferences)
    print(json.dumps(invoice, sort_keys=True))  # <- trace


main()
