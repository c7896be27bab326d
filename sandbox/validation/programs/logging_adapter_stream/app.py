"""Payment log through a LoggerAdapter: the request id (environment) travels in the
adapter's extra dictionary into every record; a StreamHandler writes the formatted records
into an io.StringIO, and the log text is read back with getvalue(). The charged amount comes
from the payments database; a debug record with the API token is filtered out by the level.

Truth: the log text comes from the request id, the amount row, the format and the message.
Decoys: the API token, whose record is never emitted.
"""

import io
import json
import logging
import os
import sqlite3
import sys


def main():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("[%(request_id)s] %(message)s"))  # <- allow:format
    log = logging.getLogger("payments")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    request_id = os.environ["REQUEST_ID"]  # <- origin:request
    adapter = logging.LoggerAdapter(log, {"request_id": request_id})
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select cents from payments where id = ?"  # <- allow:sql
    (cents,) = db.execute(sql, (sys.argv[2],)).fetchone()  # <- origin:amount
    adapter.debug("token %s", os.environ["API_TOKEN"])  # <- decoy:token
    adapter.info("charged %d cents", cents)  # <- allow:message
    text = stream.getvalue()
    log_view = {"lines": text.count("\n")}
    log_view["text"] = text
    print(json.dumps(log_view))  # <- trace


main()
