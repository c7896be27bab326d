"""Label printing job: the address from the customers database, the label template from a
JSON file, the printer from the environment, the number of copies from the command line.

Planted: the --copies option (300 typed for 3). Decoys: the other arguments, the template and
the printer, which reach the other fields of the job.
"""

import argparse
import json
import os
import sqlite3


def parse_args():
    parser = argparse.ArgumentParser(description="Print shipping labels.")
    parser.add_argument("database")
    parser.add_argument("customer")
    parser.add_argument("--template", required=True)
    parser.add_argument("--copies", type=int, default=1)
    return parser.parse_args()


def main():
    args = parse_args()
    printer = os.environ["LABEL_PRINTER"]
    with open(args.template) as fh:
        template = json.loads(fh.read())
    db = sqlite3.connect(args.database)
    query = "select name, street, city from customers where id = ?"
    name, street, city = db.execute(query, (args.customer,)).fetchone()
    label = template["layout"].format(name=name, street=street, city=city)
    job = {"printer": printer, "label": label, "copies": args.copies}
    job["sheets"] = -(-job["copies"] // template["per_sheet"])
    print(json.dumps(job, sort_keys=True))  # <- trace


main()
