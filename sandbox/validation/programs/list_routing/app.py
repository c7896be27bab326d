"""Temperature alarm: the boiler reading from the plant database, the outdoor reading from
the environment, the room readings from one CSV file per room; all collected into a list of
(sensor, celsius) pairs, and the hottest one raises the alarm.

Planted: the attic's CSV file (a faulty 97.0). Decoys: the other readings, appended to the
same list before and after it, and the history kept for the report.
"""

import json
import os
import sqlite3
import sys


def room_readings(paths):
    readings = []
    for path in paths:
        with open(path) as fh:
            text = fh.read()  # <- planted: the attic's file
        for line in text.splitlines():
            room, celsius = line.split(",")
            readings.append((room, float(celsius)))
    return readings


def hottest(readings):
    best = readings[0]
    for reading in readings:
        if reading[1] > best[1]:
            best = reading
    return best


def main():
    db = sqlite3.connect(sys.argv[1])
    readings = []
    boiler = db.execute("select celsius from sensors where name = 'boiler'").fetchone()
    readings.append(("boiler", boiler[0]))
    readings.append(("outdoor", float(os.environ["OUTDOOR_CELSIUS"])))
    readings.extend(room_readings([sys.argv[2], sys.argv[3], sys.argv[4]]))
    history = [reading[1] for reading in readings]
    history.append(history[-1])
    alarm = {"sensor": None, "celsius": None, "samples": len(history)}
    worst = hottest(readings)
    alarm["sensor"], alarm["celsius"] = worst
    alarm["last"] = history[-1]
    print(json.dumps(alarm, sort_keys=True))  # <- trace


main()
