"""Signup log with personal data: each new customer's email, read from the signups export
with csv.DictReader, is logged through logging to a log file (FileHandler) and to stdout
(StreamHandler); the reviewing operator (environment) is logged after them, and the count of
signups is printed.

Truth, backward: the text logged into memory comes from the export's emails, the format and
the message. Forward, from the first email: it reaches the file write and the stdout write
of its own log call, and no other output (not the second customer's lines, the operator's,
or the count).
"""

import csv
import io
import logging
import os
import sys

LOG_FORMAT = "%(levelname)s %(message)s"  # <- origin:format


def main():
    operator = os.environ["OPERATOR"]  # <- decoy:operator
    log = logging.getLogger("signups")
    log.setLevel(logging.INFO)
    to_file = logging.FileHandler(sys.argv[2])  # <- decoy:log-file
    to_file.setFormatter(logging.Formatter(LOG_FORMAT))
    log.addHandler(to_file)
    kept = io.StringIO()
    to_memory = logging.StreamHandler(kept)
    to_memory.setFormatter(logging.Formatter(LOG_FORMAT))
    log.addHandler(to_memory)
    log.addHandler(logging.StreamHandler(sys.stdout))
    with open(sys.argv[1], newline="") as fh:  # <- allow:open
        rows = list(csv.DictReader(fh))  # <- origin:export
    for row in rows:
        email = row["email"]
        log.info("new signup %s", email)  # <- allow:message
    logged = kept.getvalue()
    log.info("reviewed by %s", operator)  # <- decoy:review
    print(f"{len(rows)} signups, {len(logged)} characters logged")  # <- trace decoy:count
    to_file.close()


main()
