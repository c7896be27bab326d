"""Shipping quote for one parcel: its weight from the order file (JSON), the destination
zone's surcharge from the rates database, the carrier from the environment.

Planted: the per-kilogram default of parcel_cost. Decoys: the other function defaults, the
zone surcharge and the carrier reach other fields of the quote; the incidental literals on
the way (the rounding, the grams) are not configuration.
"""

import json
import os
import sqlite3
import sys


def parcel_cost(weight_kg, per_kg_cents=1250, minimum_cents=499):  # <- planted: per_kg
    return max(round(weight_kg * per_kg_cents), minimum_cents)


def handling_cost(items, per_item_cents=35):
    return len(items) * per_item_cents


def zone_surcharge(db, country):
    row = db.execute("select surcharge_cents from zones where country = ?", (country,)).fetchone()
    return row[0] if row else 0


def main():
    with open(sys.argv[2]) as fh:
        order = json.loads(fh.read())
    carrier = os.environ.get("SHIP_CARRIER", "post")
    db = sqlite3.connect(sys.argv[1])
    grams = sum(item["grams"] for item in order["items"])
    quote = {"carrier": carrier, "country": order["country"]}
    quote["parcel"] = parcel_cost(grams / 1000)
    quote["handling"] = handling_cost(order["items"])
    quote["surcharge"] = zone_surcharge(db, order["country"])
    quote["total"] = quote["parcel"] + quote["handling"] + quote["surcharge"]
    print(json.dumps(quote, sort_keys=True))  # <- trace


main()
