"""Reminder policy beside an account: a dataclass whose defaults are the policy's
constants, deep-copied and turned into a dictionary with asdict(), stored in the account
dictionary next to the balance (database) and the owner (environment).

Control: the deadline depends only on the policy's constants, although they travel through
dataclasses, a deep copy and a dictionary that holds inputs.
"""

import copy
import dataclasses
import json
import os
import sqlite3
import sys

GRACE_DAYS = 14  # <- origin:grace
MAX_REMINDERS = 3  # <- origin:reminders


@dataclasses.dataclass
class Policy:
    grace_days: int = GRACE_DAYS
    reminders: int = MAX_REMINDERS


def main():
    owner = os.environ["ACCOUNT_OWNER"]  # <- decoy:owner
    db = sqlite3.connect(sys.argv[1])  # <- decoy:db
    (balance,) = db.execute("select balance from accounts limit 1").fetchone()  # <- decoy:balance
    policy = copy.deepcopy(Policy())
    account = {"owner": owner, "balance": balance}
    account["policy"] = dataclasses.asdict(policy)
    notice = {"owner": account["owner"]}
    notice["deadline_days"] = account["policy"]["grace_days"] * account["policy"]["reminders"]
    print(json.dumps(notice))  # <- trace


main()
