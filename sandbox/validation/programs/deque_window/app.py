"""Rolling load: meter readings from the database, in time order, pushed through a
collections.deque with room for the last WINDOW readings; the average of the window.

Truth: the average comes from the last three readings and WINDOW. Decoys: the three earlier
readings, read by the same loop, which fell out of the window.
"""

import json
import sqlite3
import sys
from collections import deque

WINDOW = 3  # <- origin:window


def main():
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    window = deque(maxlen=WINDOW)
    sql = "select taken, kw from readings order by taken"  # <- allow:sql
    for _taken, kw in db.execute(sql):  # <- origin:readings decoy:early
        window.append(kw)
    load = {"readings": len(window)}
    load["average_kw"] = sum(window) / WINDOW
    print(json.dumps(load))  # <- trace


main()
