"""Order pricing from two exports: the price list (CSV) turned into a dictionary with dict()
of an iterable of split lines, the order's lines (JSON pairs) turned into a dictionary of
tuples, its SKUs listed with list(); the stock file is converted the same way for another
field.

Truth: the order total comes from the price list and the order file. Decoys: the stock file.
"""

import json
import sys


def read_lines(path):
    with open(path) as fh:  # <- allow:open
        return fh.read().splitlines()  # <- origin:prices decoy:stock


def main():
    lines = read_lines(sys.argv[1])[1:]
    price_of = dict(line.split(",") for line in lines)  # <- allow:comma
    with open(sys.argv[2]) as fh:  # <- allow:order-file
        order = json.loads(fh.read())  # <- origin:order
    quantities = dict(tuple(pair) for pair in order["lines"])
    skus = list(quantities)
    stock_lines = read_lines(sys.argv[3])[1:]
    stock = dict(line.split(",") for line in stock_lines)
    summary = {"in_stock": tuple(stock.values())}
    summary["total_cents"] = sum(int(price_of[sku]) * quantities[sku] for sku in skus)
    print(json.dumps(summary))  # <- trace


main()
