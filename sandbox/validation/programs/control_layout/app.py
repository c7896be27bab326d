"""Report layout beside report data: the column headers and widths are constants, joined
and summed into the layout; the rows (database), the title (environment) and the footer
(JSON file) are read into the same report dictionary, which the layout is merged into with
update().

Control: the rule under the header depends only on the constants, although it is computed
beside inputs and read back from the dictionary they live in.
"""

import json
import os
import sqlite3
import sys

COLUMNS = ("sku", "name", "qty", "price")  # <- origin:columns
WIDTHS = (8, 24, 5, 9)  # <- origin:widths


def layout():
    header = " | ".join(c.upper().ljust(w) for c, w in zip(COLUMNS, WIDTHS, strict=True))
    width = sum(WIDTHS) + 3 * (len(COLUMNS) - 1)  # <- allow:gaps
    return {"header": header, "width": width}


def main():
    title = os.environ["REPORT_TITLE"]  # <- decoy:title
    with open(sys.argv[2]) as fh:  # <- decoy:footer-file
        footer = json.loads(fh.read())["footer"]  # <- decoy:footer
    db = sqlite3.connect(sys.argv[1])  # <- decoy:db
    rows = db.execute("select sku, name, qty, price from lines").fetchall()  # <- decoy:rows
    report = {"title": title, "rows": rows, "footer": footer}
    report.update(layout())
    report["rule"] = "-" * report["width"]  # <- allow:dash
    print(json.dumps(report))  # <- trace


main()
