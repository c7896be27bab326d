"""Stock upload through a web API: a Flask endpoint on a real server socket takes a CSV body
(sku, qty, unit price), reads it with csv.DictReader over io.StringIO, and answers with the
upload's value; the customer's tier comes from the shop database and the shop's name from
the environment.

Truth: the value comes from the CSV body of the request. Decoys: the tier row and the
shop's name.
"""

import csv
import io
import os
import sqlite3
import sys

from flask import Flask, jsonify, request
from werkzeug.serving import make_server

app = Flask(__name__)


@app.post("/stock")
def upload():
    shop = os.environ["SHOP_NAME"]  # <- decoy:shop
    db = sqlite3.connect(sys.argv[1])  # <- decoy:db
    tier = db.execute("select tier from shops limit 1").fetchone()[0]  # <- decoy:tier
    rows = csv.DictReader(io.StringIO(request.get_data(as_text=True)))
    value = sum(int(row["qty"]) * float(row["unit_price"]) for row in rows)
    answer = {"shop": shop, "tier": tier}
    answer["value"] = round(value, 2)  # <- allow:pence
    return jsonify(answer)  # <- trace


server = make_server("127.0.0.1", int(sys.argv[2]), app)  # <- allow:server
server.handle_request()  # <- origin:request
