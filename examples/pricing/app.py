"""The checkout job of the £0.00 story: fetch an order, price it, answer with the total and
the address the receipt goes to (the customer's email: the personal data a security team
follows with `flows`).

It is an ordinary program with ordinary inputs: the order arrives over HTTP and the promotion
comes from a SQLite database. `make demo` records it with sealtrace and replays it after both
inputs are gone.
"""

import json
import sqlite3
import sys
import urllib.request

from routes.orders import create_order_response
from services.pricing import Item, Order, calculate_total
from services.promotions import get_discount


def main(order_url: str, database: str) -> int:
    with urllib.request.urlopen(order_url) as reply:  # noqa: S310 - the demo passes http://
        payload = json.loads(reply.read())
    db = sqlite3.connect(database)
    discount = get_discount(db, payload["promo"])
    items = [Item(i["sku"], i["price"]) for i in payload["items"]]
    order = Order(items=items, currency=payload["currency"], email=payload["email"])
    order.total_price = calculate_total(items, discount)
    print(json.dumps(create_order_response(order)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
