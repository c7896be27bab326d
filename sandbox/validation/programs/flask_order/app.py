"""The £0.00 order through a web API: a Flask app on a real server socket (werkzeug's
make_server, one request), SQLAlchemy's ORM for the catalogue and the promotions. The
request's JSON body names the product, the quantity and the promotion code; the response's
total_price is what the customer was charged.

Truth: total_price comes from the request body (its quantity), the product's price row and
the promotion's row (STAFF100, 100% off). Decoys: the store's name (environment) and the
welcome promotion, loaded after the order for the banner.
"""

import os
import sys

from flask import Flask, jsonify, request
from sqlalchemy import create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from werkzeug.serving import make_server


class Base(DeclarativeBase):
    pass


class Product(Base):
    __tablename__ = "products"
    sku: Mapped[str] = mapped_column(primary_key=True)
    price_pence: Mapped[int]


class Promotion(Base):
    __tablename__ = "promotions"
    code: Mapped[str] = mapped_column(primary_key=True)
    discount_pct: Mapped[int]


engine = create_engine(f"sqlite:///{sys.argv[1]}")  # <- allow:engine
app = Flask(__name__)
STORE = os.environ["STORE_NAME"]  # <- decoy:store


def get_discount(session, code):
    promo = session.scalars(select(Promotion).filter_by(code=code)).first()  # <- origin:promo
    return promo.discount_pct / 100  # <- allow:percent


@app.post("/orders")
def create_order():
    body = request.get_json()
    with Session(engine) as session:
        product = session.get(Product, body["sku"])  # <- origin:product
        subtotal = product.price_pence * body["qty"]
        discount = get_discount(session, body["promo"])
        total = round(subtotal * (1 - discount) / 100, 2)  # <- allow:arithmetic
        banner = select(Promotion).filter_by(code="WELCOME10")  # <- decoy:banner
        welcome = session.scalars(banner).first()  # <- decoy:welcome
    response = {"store": STORE, "banner_pct": welcome.discount_pct, "currency": "GBP"}
    response["total_price"] = total
    return jsonify(response)  # <- trace


server = make_server("127.0.0.1", int(sys.argv[2]), app)  # <- allow:server
server.handle_request()  # <- origin:request
