"""Price check for one product: the unit price from the catalogue database, coupons from a
JSON file, the promotion percentage from the environment.

Planted: the unit price row. Decoys that change intermediate values only: the promotion
changes the preview written to the log, the coupons change a candidate price that is never
chosen (every coupon for this product has expired), and a lookup counter.
"""

import json
import os
import sqlite3
import sys

LOOKUPS = {"count": 0}


def unit_price(db, sku):
    LOOKUPS["count"] += 1
    row = db.execute("select cents from prices where sku = ?", (sku,)).fetchone()  # <- planted
    return row[0]


def best_price(price, sku, coupons):
    best = price
    for coupon in coupons:
        candidate = price - coupon["off_cents"]
        if coupon["sku"] == sku and coupon["active"] and 0 < candidate < best:
            best = candidate
    return best


def main():
    promo_pct = int(os.environ["PROMO_PCT"])
    with open(sys.argv[2]) as fh:
        coupons = json.loads(fh.read())["coupons"]
    db = sqlite3.connect(sys.argv[1])
    sku = sys.argv[3]
    price = unit_price(db, sku)
    preview = price * (100 - promo_pct) // 100
    print(f"preview for {sku}: {preview}", file=sys.stderr)
    check = {"sku": sku, "price": best_price(price, sku, coupons)}
    check["lookups"] = LOOKUPS["count"]
    print(json.dumps(check, sort_keys=True))  # <- trace


main()
