"""Greenhouse report: the latest temperature of each growing room from the sensor database
(one query per room), the outdoor temperature from the environment, and the spread between
the warmest and the coldest of them.

Truth: the spread comes from the nursery and lab readings and the outdoor temperature (max()
and min() read every item). Decoys: the office reading, made by the same line, and the
humidity from a JSON file, both kept in the same dictionary.
"""

import json
import os
import sqlite3
import sys

GROWING_ROOMS = ("nursery", "lab")  # <- allow:rooms
QUERY = "select room, celsius from readings where room = ? order by taken desc"  # <- allow:sql


def latest(db, room):
    row = db.execute(QUERY, (room,)).fetchone()  # <- origin:reading decoy:office
    return row[1]


def main():
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    with open(sys.argv[2]) as fh:  # <- decoy:humidity-file
        humidity = json.loads(fh.read())["relative"]  # <- decoy:humidity
    readings = {"humidity": humidity}
    readings["office"] = latest(db, "office")
    for room in GROWING_ROOMS:
        readings[room] = latest(db, room)
    outdoor = float(os.environ["OUTDOOR_CELSIUS"])  # <- origin:outdoor
    temperatures = [readings[room] for room in GROWING_ROOMS]
    temperatures.append(outdoor)
    report = {"office": readings["office"], "humidity": readings["humidity"]}
    report["spread"] = max(temperatures) - min(temperatures)
    print(json.dumps(report, sort_keys=True))  # <- trace


main()
