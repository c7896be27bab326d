"""Meter readings: one CSV file per meter in a directory, streamed through a pipeline of
generators (read, parse, convert to kilowatt-hours), the meters' owners from the utilities
database, the unit label from the environment.

Planted: meter-b's file. Decoys: meter-a's and meter-c's files, which pass through the same
generators just before and after it.
"""

import json
import os
import sqlite3
import sys


def read_files(directory):
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as fh:
            yield name, fh.read()  # <- planted: meter-b's file


def parse(files):
    for _name, text in files:
        for line in text.splitlines():
            if line and not line.startswith("#"):
                meter, watt_hours = line.split(",")
                yield meter, int(watt_hours)


def to_kwh(readings):
    for meter, watt_hours in readings:
        yield meter, watt_hours / 1000


def main():
    unit = os.environ["METER_UNIT"]
    db = sqlite3.connect(sys.argv[1])
    owners = dict(db.execute("select meter, owner from meters").fetchall())
    latest = {}
    for meter, kwh in to_kwh(parse(read_files(sys.argv[2]))):
        latest[meter] = kwh
    wanted = sys.argv[3]
    answer = {"meter": wanted, "owner": owners.get(wanted), "unit": unit}
    answer["kwh"] = latest[wanted]
    print(json.dumps(answer, sort_keys=True))  # <- trace


main()
