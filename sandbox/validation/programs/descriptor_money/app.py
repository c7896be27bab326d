"""Order line in money: a Cents descriptor stores prices as whole cents (its __set__) and
gives them back as currency units (its __get__); a property multiplies by the quantity.
The price row comes from the catalogue database, the discount from the environment, the
quantity from the command line.

Truth: the line total comes from the price row, the discount, the quantity, and the
descriptor's arithmetic. Decoys: the currency (environment) and the other catalogue row.
"""

import json
import os
import sqlite3
import sys


class Cents:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        return getattr(obj, self.name) / 100  # <- allow:get

    def __set__(self, obj, value):
        setattr(obj, self.name, round(value * 100))  # <- allow:set


class Item:
    price = Cents()

    def __init__(self, sku, price, qty):
        self.sku = sku
        self.price = price
        self.qty = qty

    @property
    def total(self):
        return self.price * self.qty


def main():
    currency = os.environ["CURRENCY"]  # <- decoy:currency
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select sku, price from catalogue where sku = ?"  # <- allow:sql
    other = Item(*db.execute(sql, ("MS-220",)).fetchone(), 1)  # <- decoy:other
    sku, price = db.execute(sql, (sys.argv[2],)).fetchone()  # <- origin:price
    item = Item(sku, price, int(sys.argv[3]))
    item.price = item.price * (1 - float(os.environ["DISCOUNT"]))  # <- origin:discount allow:one
    order = {"currency": currency, "other": other.total}
    order["total"] = item.total
    print(json.dumps(order))  # <- trace


main()
