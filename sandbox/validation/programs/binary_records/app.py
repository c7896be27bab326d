"""Meter dump: a binary file with a header (magic, record count) and fixed-size records
(meter id, kWh), read with read() calls on a buffered reader and decoded with struct; the
total for one meter. The device name comes from the environment, the meter labels from a
JSON file.

Truth: the total comes from the dump's bytes, which all arrive in the buffered reader's
first read of the file: at the header's line. Decoys: the device name and the labels file.
"""

import json
import os
import struct
import sys

HEADER = struct.Struct("<4sI")  # <- allow:header
RECORD = struct.Struct("<If")  # <- allow:record


def main():
    device = os.environ["DEVICE_NAME"]  # <- decoy:device
    with open(sys.argv[2]) as fh:  # <- decoy:labels-file
        labels = json.loads(fh.read())  # <- decoy:labels
    wanted = int(sys.argv[3])
    total = 0.0  # <- allow:start
    with open(sys.argv[1], "rb") as fh:  # <- allow:open
        magic, count = HEADER.unpack(fh.read(HEADER.size))  # <- origin:dump
        for _ in range(count):
            meter, kwh = RECORD.unpack(fh.read(RECORD.size))
            if meter == wanted:
                total += kwh
    usage = {"device": device, "label": labels[str(wanted)], "magic": magic.decode()}
    usage["kwh"] = total
    print(json.dumps(usage))  # <- trace


main()
