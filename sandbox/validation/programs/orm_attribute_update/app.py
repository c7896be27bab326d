"""Credit review: a customer loaded through SQLAlchemy's ORM, the limit scaled in place by
the review factor (environment) and raised by the bonus from the review file, then flushed;
another customer is loaded afterwards for the comparison column.

Truth: the new limit comes from the customer's row, the factor and the bonus file. Decoys:
the other customer's row and the report's name.
"""

import json
import os
import sys

from sqlalchemy import create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[str] = mapped_column(primary_key=True)
    credit_limit: Mapped[float]


def main():
    title = os.environ["REPORT_NAME"]  # <- decoy:title
    factor = float(os.environ["REVIEW_FACTOR"])  # <- origin:factor
    with open(sys.argv[3]) as fh:  # <- allow:bonus-file
        bonus = json.loads(fh.read())["bonus"]  # <- origin:bonus
    engine = create_engine(f"sqlite:///{sys.argv[1]}")  # <- allow:engine
    with Session(engine) as session:
        customer = session.get(Customer, sys.argv[2])  # <- origin:customer
        customer.credit_limit *= factor
        customer.credit_limit += bonus
        session.flush()
        other = session.get(Customer, "c-2")  # <- decoy:other
        report = {"title": title, "other": other.credit_limit}
        report["credit"] = customer.credit_limit
        session.commit()
    print(json.dumps(report))  # <- trace


main()
