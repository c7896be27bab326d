"""Basket summary: the item names of one basket from the shop database, collected into a
list row by row, and formatted with str.format together with the customer's name from the
environment; the store's id (environment) and opening hours (JSON file) go elsewhere.

Truth: the summary comes from every item row, the customer, and the template. Decoys: the
store id and the hours file.
"""

import json
import os
import sqlite3
import sys

TEMPLATE = "Basket for {}: {}"  # <- origin:template


def main():
    store = os.environ["STORE_ID"]  # <- decoy:store
    with open(sys.argv[2]) as fh:  # <- decoy:hours-file
        hours = json.loads(fh.read())  # <- decoy:hours
    customer = os.environ["CUSTOMER_NAME"]  # <- origin:customer
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    items = []
    sql = "select name from items where basket = ? order by pos"  # <- allow:sql
    for (name,) in db.execute(sql, (sys.argv[3],)):  # <- origin:items
        items.append(name)
    page = {"store": store, "hours": hours}
    page["summary"] = TEMPLATE.format(customer, items)
    print(json.dumps(page))  # <- trace


main()
