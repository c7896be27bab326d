"""Webhook body: an order's amount from the orders database and its id from the command
line, serialised with json.dumps; the signing secret from the environment signs it, and the
endpoint comes from a JSON settings file.

Truth: the body comes from the order id, the amount row, and the body's own keys and
options. Decoys: the secret (only in the signature) and the settings file.
"""

import hashlib
import hmac
import json
import os
import sqlite3
import sys


def main():
    secret = os.environ["WEBHOOK_SECRET"].encode()  # <- decoy:secret
    with open(sys.argv[3]) as fh:  # <- decoy:settings-file
        endpoint = json.loads(fh.read())["endpoint"]  # <- decoy:settings
    order_id = sys.argv[2]
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select amount_cents from orders where id = ?"  # <- allow:sql
    (amount,) = db.execute(sql, (order_id,)).fetchone()  # <- origin:amount
    payload = {"order": order_id, "amount_cents": amount}  # <- allow:keys
    body = json.dumps(payload, sort_keys=True)  # <- allow:options
    request = {"url": endpoint, "body": body}
    request["signature"] = hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()
    print(json.dumps(request))  # <- trace


main()
