"""Shipping fees from a class hierarchy: a base class with a base fee and a per-kilo rate,
an Express subclass that overrides the base fee and surges the per-kilo rate through
super(), an Economy sibling with its own base fee; the parcel's weight comes from the parcel
database.

Truth: the express fee comes from Express's base fee, the base class's per-kilo rate (through
super()), the surge constant and the weight row. Decoys: the base class's base fee
(overridden) and Economy's (used for another field).
"""

import json
import sqlite3
import sys

SURGE = 1.5  # <- origin:surge


class Shipping:
    BASE_CENTS = 1000  # <- decoy:base
    PER_KG_CENTS = 150  # <- origin:per-kg

    def fee(self, kg):
        return self.BASE_CENTS + self.per_kg() * kg

    def per_kg(self):
        return self.PER_KG_CENTS


class Express(Shipping):
    BASE_CENTS = 2500  # <- origin:express

    def per_kg(self):
        return super().per_kg() * SURGE


class Economy(Shipping):
    BASE_CENTS = 500  # <- decoy:economy


def main():
    db = sqlite3.connect(sys.argv[1])  # <- allow:db
    sql = "select kg from parcels where id = ?"  # <- allow:sql
    (kg,) = db.execute(sql, (sys.argv[2],)).fetchone()  # <- origin:weight
    quote = {"economy": Economy().fee(kg)}
    quote["express"] = Express().fee(kg)
    print(json.dumps(quote))  # <- trace


main()
