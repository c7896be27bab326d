"""Signup audit through logging: a handler that keeps each formatted record in a list, a
Formatter with the audit format, a logger named for the feature; the new customer's email
comes from the signups export, the reviewing operator from the environment (logged on its
own line).

Truth: the signup line comes from the email in the export, the format, the logger's name and
the message template. Decoys: the operator and its log call.
"""

import json
import logging
import os
import sys

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"  # <- origin:format


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(self.format(record))


def main():
    operator = os.environ["OPERATOR"]  # <- decoy:operator
    handler = ListHandler()
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    log = logging.getLogger("signup")  # <- allow:logger
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    with open(sys.argv[1]) as fh:  # <- allow:open
        rows = fh.read().splitlines()  # <- origin:export
    email = rows[1].split(",")[0]  # <- allow:comma
    log.info("new signup %s", email)  # <- allow:message
    log.info("reviewed by %s", operator)  # <- decoy:review
    audit = {"reviewed": handler.lines[1]}
    audit["signup"] = handler.lines[0]
    print(json.dumps(audit))  # <- trace


main()
