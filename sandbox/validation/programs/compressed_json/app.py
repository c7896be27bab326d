"""Account snapshot from an API dump: base64 text of zlib-compressed UTF-8 JSON, decoded
layer by layer (base64, zlib, UTF-8, JSON); the balance in whole units. The branch name
comes from a second, plain JSON file.

Truth: the balance comes from the dump. Decoys: the branch file.
"""

import base64
import json
import sys
import zlib


def main():
    with open(sys.argv[2]) as fh:  # <- decoy:branch-file
        branch = json.loads(fh.read())["branch"]  # <- decoy:branch
    with open(sys.argv[1], "rb") as fh:  # <- allow:open
        packed = fh.read()  # <- origin:dump
    text = zlib.decompress(base64.b64decode(packed)).decode("utf-8")  # <- allow:codec
    snapshot = json.loads(text)
    account = {"branch": branch}
    account["balance"] = snapshot["balance_cents"] / 100  # <- allow:cents
    print(json.dumps(account))  # <- trace


main()
