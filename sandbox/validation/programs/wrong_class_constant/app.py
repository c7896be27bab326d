"""Checkout quote: the customer's tier from the customers database, the cart from a JSON
file, the shipping fee from the environment.

Planted: Gold.discount_pct in tiers.py. Decoys: the other tiers' discounts, the cart and the
shipping fee, which reach other fields of the quote.
"""

import json
import os
import sqlite3
import sys

from tiers import TIERS


def customer_tier(db, customer):
    row = db.execute("select tier from customers where name = ?", (customer,)).fetchone()
    return TIERS[row[0]]


def main():
    shipping = int(os.environ["SHIPPING_CENTS"])
    with open(sys.argv[2]) as fh:
        cart = json.loads(fh.read())
    tier = customer_tier(sqlite3.connect(sys.argv[1]), cart["customer"])
    subtotal = sum(line["cents"] * line["qty"] for line in cart["lines"])
    quote = {"tier": tier.name, "subtotal": subtotal}
    quote["discount_pct"] = tier.discount_pct
    quote["discount"] = subtotal * quote["discount_pct"] // 100
    quote["shipping"] = 0 if tier.free_shipping else shipping
    quote["total"] = subtotal - quote["discount"] + quote["shipping"]
    print(json.dumps(quote, sort_keys=True))  # <- trace


main()
