"""Order pricing from two exports: the price list (CSV) turned into a dictionary with
dict(zip(...)), the order's lines (JSON pairs) turned into a dictionary of tuples, its SKUs
listed with list(); the stock file is converted the same way for another field.

Truth: the order total comes from the price list and the order file. Decoys: the stock file.
"""

import json
import sys


def read_lines(path):
    with open(path) as fh:  # <- allow:open
        return fh.read().splitlines()  # <- origin:prices decoy:stock


def main():
    lines = read_lines(sys.argv[1])[1:]
    names = [line.split(",")[0] for line in lines]
    cents = [int(line.split(",")[1]) for line in lines]  # <- allow:comma
    price_of = dict(zip(names, cents, strict=True))
    with open(sys.argv[2]) as fh:  # <- allow:order-file
        order = json.loads(fh.read())  # <- origin:order
    quantities = dict(tuple(pair) for pair in order["lines"])
    skus = list(quantities)
    stock_lines = read_lines(sys.argv[3])[1:]
    skus_in_stock = [s.split(",")[0] for s in stock_lines]
    on_hand = [s.split(",")[1] for s in stock_lines]
    stock = dict(zip(skus_in_stock, on_hand, strict=True))
    summary = {"in_stock": tuple(stock.values())}
    summary["total_cents"] = sum(price_of[sku] * quantities[sku] for sku in skus)
    print(json.dumps(summary))  # <- trace


main()
