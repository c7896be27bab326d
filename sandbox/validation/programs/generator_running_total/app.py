"""Stock level: delivery quantities from two files streamed with `yield from` through a
generator per file, and a running-total generator started at the opening stock; the last
total is the closing stock. The archive file is streamed the same way for another field.

Truth: the closing stock comes from both delivery files and the opening stock. Decoys: the
archive file.
"""

import json
import sys

OPENING_STOCK = 40  # <- origin:opening


def quantities(path):
    with open(path) as fh:  # <- allow:open
        for line in fh:  # <- origin:deliveries decoy:archive
            yield int(line)


def batches(paths):
    for path in paths:
        yield from quantities(path)


def running_total(values):
    total = OPENING_STOCK
    for value in values:
        total += value
        yield total


def main():
    archived = sum(quantities(sys.argv[3]))
    *_, closing = running_total(batches(sys.argv[1:3]))
    stock = {"archived": archived}
    stock["closing"] = closing
    print(json.dumps(stock))  # <- trace


main()
