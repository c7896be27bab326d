"""Service settings in layers: defaults in an OrderedDict, updated from the service's JSON
file, then the timeout from the environment; the retry budget is the timeout times the
retries.

Truth: the budget comes from the environment's timeout and the file's retries. Decoys: the
defaults, every one of them overridden before the budget is computed.
"""

import json
import os
import sys
from collections import OrderedDict

DEFAULTS = OrderedDict(timeout=30, retries=3)  # <- decoy:defaults


def main():
    settings = OrderedDict(DEFAULTS)
    with open(sys.argv[1]) as fh:  # <- allow:open
        settings.update(json.loads(fh.read()))  # <- origin:file
    settings["timeout"] = int(os.environ["SERVICE_TIMEOUT"])  # <- origin:timeout
    settings.move_to_end("timeout")
    plan = {"order": list(settings)}
    plan["budget"] = settings["timeout"] * settings["retries"]
    print(json.dumps(plan))  # <- trace


main()
