"""Error count: the level of each line of an application log counted with
collections.Counter, plus errors reported by a sidecar (environment); the access log is
counted the same way for another field.

Truth: the error count comes from the application log and the sidecar's count. Decoys: the
access log.
"""

import json
import os
import sys
from collections import Counter


def levels(path):
    with open(path) as fh:  # <- allow:open
        lines = list(fh)  # <- origin:app-log decoy:access-log
    return [line.split(" ", 2)[1] for line in lines]  # <- allow:parse


def main():
    counts = Counter(levels(sys.argv[1]))
    counts["ERROR"] += int(os.environ["SIDECAR_ERRORS"])  # <- origin:sidecar
    access = Counter(levels(sys.argv[2]))
    summary = {"access_warnings": access["WARN"]}
    summary["errors"] = counts["ERROR"]
    print(json.dumps(summary))  # <- trace


main()
