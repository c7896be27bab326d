"""Spending limits for one account: the daily override from the limits database, the weekly
cap from the environment, the monthly cap and the account's profile from a JSON file; the
result is merged with the defaults and routed through nested dictionaries.

Planted: the account's daily override row. Decoys: the weekly and monthly values, read
before it and stored in the same dictionaries.
"""

import json
import os
import sqlite3
import sys

DEFAULT_LIMITS = {"daily": 500, "weekly": 2000, "monthly": 6000}


def load_overrides(db, account, profile_path):
    overrides = {}
    overrides["weekly"] = int(os.environ["WEEKLY_CAP"])
    with open(profile_path) as fh:
        profile = json.loads(fh.read())
    overrides["monthly"] = profile["monthly_cap"]
    query = "select amount from overrides where account = ? and period = 'daily'"
    row = db.execute(query, (account,)).fetchone()  # <- planted
    if row is not None:
        overrides["daily"] = row[0]
    return overrides, profile


def merge(defaults, overrides):
    merged = {}
    for period in defaults:
        merged[period] = overrides.get(period, defaults[period])
    return merged


def render(account, profile, limits):
    response = {"account": account, "owner": profile["owner"]}
    section = response.setdefault("limits", {})
    for period in ("daily", "weekly", "monthly"):
        section[period] = {"cap": limits[period], "currency": profile["currency"]}
    return response


def main():
    db = sqlite3.connect(sys.argv[1])
    overrides, profile = load_overrides(db, sys.argv[2], sys.argv[3])
    limits = merge(DEFAULT_LIMITS, overrides)
    response = render(sys.argv[2], profile, limits)
    print(json.dumps(response, sort_keys=True))  # <- trace


main()
