"""The £0.00 order, priced from the command line: SQLAlchemy's ORM loads the product and
the promotion the customer typed, and the total applies the promotion's discount. A second
promotion is loaded afterwards for the welcome banner.

Truth: the total comes from the product's price row, the promotion's row (STAFF100, 100%
off), and the quantity. Decoys: the welcome promotion's row, loaded by its own query.
"""

import json
import sys

from sqlalchemy import create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class Product(Base):
    __tablename__ = "products"
    sku: Mapped[str] = mapped_column(primary_key=True)
    name: Mapped[str]
    price_pence: Mapped[int]


class Promotion(Base):
    __tablename__ = "promotions"
    code: Mapped[str] = mapped_column(primary_key=True)
    discount_pct: Mapped[int]


def get_discount(session, code):
    promo = session.scalars(select(Promotion).filter_by(code=code)).first()  # <- origin:promo
    return promo.discount_pct / 100  # <- allow:percent


def price_order(session, sku, qty, code):
    product = session.get(Product, sku)  # <- origin:product
    subtotal = product.price_pence * qty
    discount = get_discount(session, code)
    return round(subtotal * (1 - discount) / 100, 2)  # <- allow:arithmetic


def main():
    engine = create_engine(f"sqlite:///{sys.argv[1]}")  # <- allow:engine
    with Session(engine) as session:
        order = {"promo": sys.argv[4]}
        order["total_price"] = price_order(session, sys.argv[2], int(sys.argv[3]), sys.argv[4])
        banner = select(Promotion).filter_by(code="WELCOME10")  # <- decoy:banner
        welcome = session.scalars(banner).first()  # <- decoy:welcome
        order["banner_pct"] = welcome.discount_pct
    print(json.dumps(order))  # <- trace


main()
