"""Delivery times: minutes per delivery from the courier's export (one line per delivery),
sorted, and the median taken from the middle; cancelled deliveries come from a second file
and the report's time zone from the environment.

Truth: the median comes from the deliveries file (sorted() reads every item). Decoys: the
cancellations file and the time zone.
"""

import json
import os
import sys


def minutes(path):
    with open(path) as fh:  # <- allow:open
        lines = fh.readlines()  # <- origin:deliveries
    return [float(line.split(";")[1]) for line in lines if line.strip()]  # <- allow:semicolon


def main():
    zone = os.environ["REPORT_TZ"]  # <- decoy:zone
    with open(sys.argv[2]) as fh:  # <- decoy:cancelled-file
        cancelled = fh.read().split()  # <- decoy:cancelled
    times = minutes(sys.argv[1])
    ordered = sorted(times)
    stats = {"zone": zone, "cancelled": len(cancelled)}
    stats["median"] = ordered[len(ordered) // 2]
    print(json.dumps(stats))  # <- trace


main()
