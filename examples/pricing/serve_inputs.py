"""The checkout job's inputs: a promotions database (STAFF100, a 100 % staff test code, left
active) and the customer's order served over HTTP on loopback.

    python serve_inputs.py DIRECTORY

creates DIRECTORY/promotions.db and DIRECTORY/order.json, prints the HTTP port on the first
line of stdout, and serves DIRECTORY until killed. `make demo` and the provenance story test
both use it; after recording, stopping it and deleting DIRECTORY takes every input away.
"""

import functools
import http.server
import shutil
import sqlite3
import sys
from pathlib import Path

PROMOTIONS = [("SPRING10", 10), ("STAFF100", 100)]


def main(directory: str) -> None:
    inputs = Path(directory)
    inputs.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).with_name("order.json"), inputs / "order.json")
    db = sqlite3.connect(inputs / "promotions.db")
    db.execute("CREATE TABLE promotions (code TEXT PRIMARY KEY, discount_pct INTEGER)")
    db.executemany("INSERT INTO promotions VALUES (?, ?)", PROMOTIONS)
    db.commit()
    db.close()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(inputs))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        print(server.server_address[1], flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
