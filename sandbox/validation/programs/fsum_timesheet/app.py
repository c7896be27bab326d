"""Timesheet pay: hours per shift read line by line from the timesheet, summed with
math.fsum, times the hourly rate from the environment, rounded to pence; overtime hours
come from a second file and are paid in another field.

Truth: the pay comes from the timesheet's lines and the rate. Decoys: the overtime file.
"""

import json
import math
import os
import sys


def shift_hours(path):
    hours = []
    with open(path) as fh:  # <- allow:open
        while line := fh.readline():  # <- origin:timesheet
            _day, worked = line.rstrip("\n").split(";")  # <- allow:parse
            hours.append(float(worked))
    return hours


def main():
    with open(sys.argv[2]) as fh:  # <- decoy:overtime-file
        overtime = [float(x) for x in fh.read().split()]  # <- decoy:overtime
    rate = float(os.environ["HOURLY_RATE"])  # <- origin:rate
    hours = shift_hours(sys.argv[1])
    pay = {"overtime_hours": math.fsum(overtime)}
    pay["basic"] = round(math.fsum(hours) * rate, 2)  # <- allow:pence
    print(json.dumps(pay))  # <- trace


main()
