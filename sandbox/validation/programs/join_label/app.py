"""Shipping label: the customer's name from the customer database, the street from the
address book (a JSON file) and the city from the environment, joined into lines.

Truth: the label comes from the name row, the address book and the city. Decoys: the sender
and the label printer, both from the environment, which go into other fields of the job.
"""

import json
import os
import sqlite3
import sys


def main():
    sender = os.environ["SENDER"]  # <- decoy:sender
    printer = os.environ["LABEL_PRINTER"]  # <- decoy:printer
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select name from customers where id = ?"  # <- allow:sql
    name = db.execute(sql, (sys.argv[3],)).fetchone()[0]  # <- origin:name
    with open(sys.argv[2]) as fh:  # <- allow:book-file
        book = json.loads(fh.read())  # <- origin:book
    city = os.environ["DELIVERY_CITY"]  # <- origin:city
    parts = [name.upper(), book["street"], city]
    job = {"sender": sender, "printer": printer}
    job["label"] = "\n".join(parts)  # <- allow:separator
    print(json.dumps(job))  # <- trace


main()
