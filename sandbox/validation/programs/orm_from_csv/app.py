"""Customer import: rows of a CSV export (csv.DictReader) become ORM objects whose mapped
attributes are set by SQLAlchemy's instrumented __init__, added and committed; the import's
batch label comes from the environment, and the existing customer count from a query.

Truth: the imported customer's limit comes from the CSV export. Decoys: the batch label and
the count.
"""

import csv
import json
import os
import sys

from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[str] = mapped_column(primary_key=True)
    credit_limit: Mapped[int]


def main():
    batch = os.environ["IMPORT_BATCH"]  # <- decoy:batch
    with open(sys.argv[2], newline="") as fh:  # <- allow:open
        rows = list(csv.DictReader(fh))  # <- origin:export
    engine = create_engine(f"sqlite:///{sys.argv[1]}")
    with Session(engine, expire_on_commit=False) as session:
        imported = [Customer(id=row["id"], credit_limit=int(row["limit"])) for row in rows]
        session.add_all(imported)
        session.commit()
        count = session.scalar(select(func.count()).select_from(Customer))  # <- decoy:count
    summary = {"batch": batch, "customers": count}
    summary["first_limit"] = imported[0].credit_limit
    print(json.dumps(summary))  # <- trace


main()
