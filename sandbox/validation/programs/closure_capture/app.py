"""Price list in three currencies: list prices from the catalogue file (JSON), each rate
captured by a converter closure; the pound rate comes from the environment, the dollar rate
from the rates database, the euro rate from the environment.

Planted: EUR_RATE. Decoys: the pound and dollar rates, captured by closures made from the
same code before the euro one, and a closure that counts conversions.
"""

import json
import os
import sqlite3
import sys


def make_converter(rate):
    def convert(cents):
        return round(cents * rate)

    return convert


def make_counter():
    count = 0

    def bump(step):
        nonlocal count
        count += step
        return count

    return bump


def main():
    with open(sys.argv[2]) as fh:
        catalogue = json.loads(fh.read())
    converters = {"GBP": make_converter(float(os.environ["GBP_RATE"]))}
    usd = sqlite3.connect(sys.argv[1]).execute("select rate from rates where code = 'USD'")
    converters["USD"] = make_converter(usd.fetchone()[0])
    converters["EUR"] = make_converter(float(os.environ["EUR_RATE"]))  # <- planted
    conversions = make_counter()
    prices = {}
    for sku, cents in catalogue["list_cents"].items():
        prices[sku] = {code: convert(cents) for code, convert in converters.items()}
        conversions(len(converters))
    prices["conversions"] = conversions(0)
    print(json.dumps(prices, sort_keys=True))  # <- trace


main()
