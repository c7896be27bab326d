"""Event stream totals: a JSON-lines file of shop events parsed by a generator function,
filtered by a second generator, and the purchase amounts summed per customer into a
dictionary; the feed's name comes from the environment.

Truth: ines's total comes from the events file. Decoys: the feed name.
"""

import json
import os
import sys


def events(path):
    with open(path) as fh:  # <- allow:open
        for line in fh:  # <- origin:events
            yield json.loads(line)


def purchases(stream):
    for event in stream:
        if event["type"] == "purchase":
            yield event["customer"], event["amount"]


def main():
    feed = os.environ["FEED_NAME"]  # <- decoy:feed
    spent = {}
    for customer, amount in purchases(events(sys.argv[1])):
        spent[customer] = spent.get(customer, 0) + amount  # <- allow:zero
    report = {"feed": feed}
    report["ines"] = spent["ines"]
    print(json.dumps(report))  # <- trace


main()
