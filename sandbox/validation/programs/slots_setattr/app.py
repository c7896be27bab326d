"""Sensor calibration: each line of a sensor export parsed into a __slots__ object by
setattr() over the slot names, the value corrected by the calibration offset; the site name
comes from the environment and the unit table from a JSON file.

Truth: the calibrated value comes from the export's line and the offset constant. Decoys:
the site and the unit table.
"""

import json
import os
import sys

CALIBRATION = -0.75  # <- origin:calibration


class Reading:
    __slots__ = ("sensor", "unit", "value")


def parse(line):
    reading = Reading.__new__(Reading)
    fields = line.split(",")  # <- allow:comma
    for i, name in enumerate(Reading.__slots__):
        setattr(reading, name, fields[i].strip())
    return reading


def main():
    site = os.environ["SITE_NAME"]  # <- decoy:site
    with open(sys.argv[2]) as fh:  # <- decoy:units-file
        units = json.loads(fh.read())  # <- decoy:units
    with open(sys.argv[1]) as fh:  # <- allow:open
        readings = [parse(line) for line in fh.read().splitlines()]  # <- origin:export
    first = readings[0]
    calibrated = {"site": site, "unit": units[first.unit]}
    calibrated["value"] = float(first.value) + CALIBRATION
    print(json.dumps(calibrated))  # <- trace


main()
